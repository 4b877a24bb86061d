// The web chat page that `serve` answers GET / with: one self-contained HTML file
// (src/server/web/chat.html: inline CSS and JavaScript, nothing loaded from elsewhere), embedded
// in the binary at build time by cmake/EmbedFile.cmake. docs/SERVER.md describes the page.
#pragma once

#include <string_view>

namespace deltafin::server {

std::string_view ChatPage();

}  // namespace deltafin::server
