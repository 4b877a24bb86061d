// Vocabulary construction for make-model: a tiny greedy BPE trainer over embedded prose, a
// deterministic filler for vocabularies larger than that prose supports, and writers for the two
// tokenizer files in the exact format of K3's (see bpe_vocab.h).
#include "modelgen/bpe_vocab.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_set>
#include <utility>

namespace deltafin {

namespace {

// Training text for the learned merges: plain English prose written for this file (no third-party
// text), ASCII only so every merge is a clean word piece.
constexpr std::string_view kTrainingText = R"(
The old harbour town wakes slowly. Before the sun clears the hills, the bakers have already lit
their ovens, and the smell of warm bread drifts down the narrow streets toward the water. Fishing
boats come back with the tide, their decks shining with the night's catch, and the gulls follow
them in, calling loudly over the grey sea. By seven o'clock the market square is full of people
who have come to buy fish, fruit, cheese and flowers, and to talk about the weather.

The weather is the first thing anyone mentions here. In the spring the wind turns to the west and
brings soft rain that lasts for days. In the summer the air is still and the sea is so calm that
you can see the stones on the bottom from the end of the pier. In the autumn the storms arrive,
one after another, and the waves break over the harbour wall with a sound like distant thunder.
In the winter the days are short and the lamps in the windows are lit by four in the afternoon.

A small school stands at the top of the hill. Every morning the children walk up the steep road
with their bags on their backs, counting the steps and racing each other to the gate. Their
teacher has worked there for more than twenty years. She knows the name of every family in the
town, and she likes to say that the best lessons are the ones that begin with a question. Why
does the tide come in twice a day? How far away is the moon? What makes the sky turn red in the
evening? The children write their answers in thick notebooks, and the notebooks are kept on a
shelf by the window, where anyone can read them.

Down by the river there is a mill that has been turning since long before anyone living can
remember. The water runs over the great wooden wheel, the wheel turns the stones, and the stones
grind the grain into flour. The miller is a quiet man who says little but notices everything.
He can tell from the sound of the stones whether the grain is too wet, and from the colour of the
water whether it has rained in the mountains. When visitors ask him how the mill works, he smiles
and tells them to listen, because the mill explains itself better than he ever could.

In the evenings people gather at the inn near the bridge. Some of them play cards, some of them
sing, and some of them simply sit by the fire and watch the flames. The innkeeper keeps a large
book in which travellers write a few lines about where they came from and where they are going.
Over the years the book has filled with hundreds of stories: a sailor who had crossed the ocean
nine times, a student who was walking to the capital to study medicine, a painter who wanted to
capture the exact light of the harbour at dawn, and a family that had lost their way in the fog
and found the town by following the sound of the bell.

The bell hangs in a tower above the old church. It was cast more than three hundred years ago,
and it still rings every hour, day and night. When the fog is thick, the keeper of the tower
rings it every few minutes so that the boats at sea can find their way home. Many of the older
fishermen say that they owe their lives to that bell. They tell their children and grandchildren
about the night of the great storm, when the lights of the harbour disappeared behind the rain
and the only thing that guided them back was the slow, steady voice of the bell.

Learning a new skill takes patience. The first attempts are clumsy, the hands do not know what the
mind wants, and every small mistake feels large. But with practice the movements become easier,
the mistakes become rarer, and one day the work seems to happen almost by itself. This is true of
baking bread, of sailing a boat, of playing the violin, and of writing a clear sentence. It is also
true of reading a map, building a wall, repairing a net, or teaching a child to count.

Numbers have their own rhythm. One, two, three, four: the children chant them as they climb the
hill. Ten boats left the harbour this morning and nine have returned; the last one is still out
beyond the point, and everyone on the pier is watching the horizon. The market opens at 7 and
closes at 12. The mill was built in 1712, the bell was cast in 1698, and the school celebrated its
150th year last spring with a long table in the square and music until midnight.

Good tools are worth the price. A sharp knife, a strong rope, a well-made boat and a reliable
clock will serve their owners for many years, and they are often passed from parents to children.
In the workshop behind the harbour an old carpenter repairs chairs, tables, doors and windows.
He says that wood remembers how it grew, and that a good carpenter must learn to listen to the
grain before he cuts it. His apprentice is a young woman from the next valley who came to learn
the trade and has decided to stay.

At night, when the streets are quiet, you can hear the sea breathing against the stones. The
lighthouse turns its long white beam across the water, once every ten seconds, and the stars come
out one by one above the dark line of the hills. Tomorrow the bakers will light their ovens again,
the boats will go out with the tide, and the town will begin another ordinary, remarkable day.
)";

// splitmix64: the deterministic source for the pseudo-random merges (fixed seed, so the
// vocabulary never depends on the model seed or the platform's <random>).
uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

bool IsLetter(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }
bool IsDigit(char ch) { return ch >= '0' && ch <= '9'; }

// Splits the text GPT-style: a piece is an optional single leading space followed by a run of
// letters (with a trailing 's / 't etc. kept apart), of up to 3 digits, or of punctuation; other
// whitespace (newlines) stands alone. Merges therefore never span words, as in a real tokenizer.
std::map<std::string, int64_t> CountWords(std::string_view text) {
  std::map<std::string, int64_t> counts;
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = i;
    if (text[i] == ' ' && i + 1 < text.size() && text[i + 1] != ' ' && text[i + 1] != '\n') ++i;
    const char ch = text[i];
    if (IsLetter(ch)) {
      while (i < text.size() && IsLetter(text[i])) ++i;
    } else if (IsDigit(ch)) {
      const size_t digits_start = i;
      while (i < text.size() && IsDigit(text[i]) && i - digits_start < 3) ++i;
    } else if (ch == ' ' || ch == '\n') {
      ++i;
    } else {
      while (i < text.size() && !IsLetter(text[i]) && !IsDigit(text[i]) && text[i] != ' ' &&
             text[i] != '\n') {
        ++i;
      }
    }
    ++counts[std::string(text.substr(start, i - start))];
  }
  return counts;
}

// Greedy BPE training: repeatedly merge the most frequent adjacent pair (ties: the pair with the
// smallest ids, for determinism) until `tokens` holds `num_ranks` entries or no pair occurs twice.
void LearnMerges(int64_t num_ranks, std::vector<std::string>* tokens,
                 std::map<std::string, int64_t>* index) {
  struct Word {
    std::vector<int64_t> ids;
    int64_t count;
  };
  std::vector<Word> words;
  for (const auto& [text, count] : CountWords(kTrainingText)) {
    Word w{{}, count};
    for (unsigned char byte : text) w.ids.push_back(byte);
    words.push_back(std::move(w));
  }
  while (static_cast<int64_t>(tokens->size()) < num_ranks) {
    std::map<std::pair<int64_t, int64_t>, int64_t> pair_counts;
    for (const Word& w : words) {
      for (size_t j = 0; j + 1 < w.ids.size(); ++j)
        pair_counts[{w.ids[j], w.ids[j + 1]}] += w.count;
    }
    std::pair<int64_t, int64_t> best{-1, -1};
    int64_t best_count = 1;  // a pair must occur at least twice to be worth a rank
    for (const auto& [pair, count] : pair_counts) {
      if (count > best_count) best = pair, best_count = count;
    }
    if (best.first < 0) return;
    const std::string merged =
        (*tokens)[static_cast<size_t>(best.first)] + (*tokens)[static_cast<size_t>(best.second)];
    // Two different splits can spell the same bytes ("ab"+"c", "a"+"bc"): reuse the existing rank
    // so every token stays distinct.
    auto [it, inserted] = index->emplace(merged, static_cast<int64_t>(tokens->size()));
    if (inserted) tokens->push_back(merged);
    const int64_t merged_id = it->second;
    for (Word& w : words) {
      std::vector<int64_t> out;
      out.reserve(w.ids.size());
      for (size_t j = 0; j < w.ids.size(); ++j) {
        if (j + 1 < w.ids.size() && w.ids[j] == best.first && w.ids[j + 1] == best.second) {
          out.push_back(merged_id);
          ++j;
        } else {
          out.push_back(w.ids[j]);
        }
      }
      w.ids = std::move(out);
    }
  }
}

// Fills the remaining ranks with merges of pseudo-random pairs: a short printable existing token
// (<= 6 bytes of visible ASCII or space) followed by a visible byte, letters weighted like English.
// Keeping the left side short bounds token length (merging arbitrary pairs would double lengths
// without limit); keeping it printable keeps the tail of the vocabulary word-like.
Status AddRandomMerges(int64_t num_ranks, std::vector<std::string>* tokens,
                       std::map<std::string, int64_t>* index) {
  constexpr std::string_view kLetters =
      "eeeeeeettttttaaaaaooooiiiinnnnsssshhhhrrrrdddllluuccmmwwffggyy"
      "ppbbvkjxqz";
  constexpr size_t kMaxLeftBytes = 6;
  auto printable = [](const std::string& t) {
    return std::all_of(t.begin(), t.end(), [](char ch) { return ch >= 0x20 && ch < 0x7F; });
  };
  std::vector<int64_t> short_ids;
  for (size_t r = 0; r < tokens->size(); ++r) {
    const std::string& t = (*tokens)[r];
    if (t.size() <= kMaxLeftBytes && printable(t)) short_ids.push_back(static_cast<int64_t>(r));
  }
  uint64_t state = 0x4B33'564F'4341'4231ull;  // fixed: the vocabulary must not depend on the seed
  const int64_t needed = num_ranks - static_cast<int64_t>(tokens->size());
  int64_t attempts = 0;
  while (static_cast<int64_t>(tokens->size()) < num_ranks) {
    if (++attempts > 64 * needed + 1024) {
      return Status::Error("BuildBpeVocab: could not find " + std::to_string(num_ranks) +
                           " distinct tokens");
    }
    const uint64_t r = SplitMix64(&state);
    const std::string& left = (*tokens)[static_cast<size_t>(short_ids[r % short_ids.size()])];
    const uint64_t pick = r >> 40;
    char right;
    if ((pick & 3) != 0) {
      right = kLetters[(pick >> 2) % kLetters.size()];
    } else {
      right = static_cast<char>(0x21 + (pick >> 2) % (0x7F - 0x21));  // any visible ASCII byte
    }
    std::string merged = left + right;
    if (index->count(merged)) continue;
    const auto id = static_cast<int64_t>(tokens->size());
    index->emplace(merged, id);
    if (merged.size() <= kMaxLeftBytes) short_ids.push_back(id);
    tokens->push_back(std::move(merged));
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<std::string>> BuildBpeVocab(int64_t num_ranks) {
  if (num_ranks < 256) {
    return Status::Error("BuildBpeVocab: " + std::to_string(num_ranks) +
                         " ranks requested; a byte-level vocabulary needs at least 256");
  }
  std::vector<std::string> tokens;
  tokens.reserve(static_cast<size_t>(num_ranks));
  std::map<std::string, int64_t> index;
  for (int b = 0; b < 256; ++b) {
    tokens.emplace_back(1, static_cast<char>(b));
    index.emplace(tokens.back(), b);
  }
  LearnMerges(num_ranks, &tokens, &index);
  DF_RETURN_IF_ERROR(AddRandomMerges(num_ranks, &tokens, &index));
  return tokens;
}

std::string SpecialTokenContent(int64_t first_special_id, int64_t offset) {
  switch (offset) {
    case 0:
      return "[BOS]";
    case 1:
      return "[EOS]";
    case 2:
      return "<|end_of_msg|>";
    case 3:
      return "<|open|>";
    case 4:
      return "<|close|>";
    case 5:
      return "<|sep|>";
    case 6:
      return "[start_header_id]";
    case 7:
      return "[end_header_id]";
    case 9:
      return "[EOT]";
    case 18:
      return "<|media_begin|>";
    case 19:
      return "<|media_content|>";
    case 20:
      return "<|media_end|>";
    case 21:
      return "<|media_pad|>";
    case 65:
      return "<osagent_mode>";
    case 254:
      return "[UNK]";
    case 255:
      return "[PAD]";
    default:
      return "<|reserved_token_" + std::to_string(first_special_id + offset) + "|>";
  }
}

std::string Base64Encode(const std::string& bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16 |
                       static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8 |
                       static_cast<unsigned char>(bytes[i + 2]);
    for (int shift : {18, 12, 6, 0}) out.push_back(kAlphabet[(v >> shift) & 63]);
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (rest == 2) v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::string TiktokenModelText(const std::vector<std::string>& tokens) {
  std::string out;
  for (size_t rank = 0; rank < tokens.size(); ++rank) {
    out += Base64Encode(tokens[rank]);
    out += ' ';
    out += std::to_string(rank);
    out += '\n';
  }
  return out;
}

std::string TokenizerConfigJson(int64_t first_special_id, int64_t model_max_length) {
  nlohmann::ordered_json decoder = nlohmann::ordered_json::object();
  for (int64_t offset = 0; offset < kNumSpecialTokens; ++offset) {
    decoder[std::to_string(first_special_id + offset)] = {
        {"content", SpecialTokenContent(first_special_id, offset)},
        {"lstrip", false},
        {"normalized", false},
        {"rstrip", false},
        {"single_word", false},
        {"special", true}};
  }
  nlohmann::ordered_json config;
  config["added_tokens_decoder"] = std::move(decoder);
  config["additional_special_tokens"] = {"<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>"};
  config["bos_token"] = "[BOS]";
  config["eos_token"] = "[EOS]";
  config["pad_token"] = "[PAD]";
  config["unk_token"] = "[UNK]";
  config["clean_up_tokenization_spaces"] = false;
  config["model_max_length"] = model_max_length;
  config["tokenizer_class"] = "TikTokenTokenizer";
  config["auto_map"] = {{"AutoTokenizer", {"tokenization_kimi.TikTokenTokenizer", nullptr}}};
  return config.dump(2) + "\n";
}

}  // namespace deltafin
