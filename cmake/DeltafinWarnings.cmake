# Warnings and sanitizers, applied to every project target through df_options.
add_library(df_options INTERFACE)
target_compile_options(df_options INTERFACE -Wall -Wextra -Wshadow -Wnon-virtual-dtor
                                            -Wimplicit-fallthrough)
if(DF_WERROR)
  target_compile_options(df_options INTERFACE -Werror)
endif()
if(DF_SANITIZE)
  string(REPLACE ";" "," _df_sanitizers "${DF_SANITIZE}")
  target_compile_options(df_options INTERFACE -fsanitize=${_df_sanitizers}
                                              -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(df_options INTERFACE -fsanitize=${_df_sanitizers})
endif()
# Never -ffast-math: softmax, sigmoid and the KDA gates rely on IEEE inf/NaN behaviour.
