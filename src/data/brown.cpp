// brown: the Brown corpus reader (see brown.h): word/tag detection and detokenization.
#include "data/brown.h"

#include <algorithm>  // std::all_of
#include <string>
#include <utility>    // std::pair
#include <vector>

namespace ms {

namespace {

bool is_tag_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         std::string_view("$'()*+,-.:`").find(c) != std::string_view::npos;
}

std::vector<std::string_view> split_ws(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

// word/tag -> (word, tag) at the LAST '/'; a token without '/' is all word.
std::pair<std::string_view, std::string_view> split_tag(std::string_view tok) {
  size_t s = tok.rfind('/');
  if (s == std::string_view::npos || s == 0) return {tok, {}};
  return {tok.substr(0, s), tok.substr(s + 1)};
}

bool no_space_before(std::string_view w) {
  static const char* kAttach[] = {",", ".", ";", ":", "?", "!", ")", "]", "}", "%", "n't", "N'T"};
  for (const char* a : kAttach)
    if (w == a) return true;
  if (w.size() >= 2 && std::all_of(w.begin(), w.end(), [](char c) { return c == '.' || c == '?' || c == '!'; }))
    return true;  // "...", "?!"
  // Clitics: 's 're 've 'll 'd 'm 't, any case (but not words like 'em or 'til).
  if (w.size() >= 2 && w.size() <= 3 && w[0] == '\'') {
    std::string low;
    for (char c : w.substr(1)) low.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    for (const char* c : {"s", "re", "ve", "ll", "d", "m", "t"})
      if (low == c) return true;
  }
  return false;
}

bool no_space_after(std::string_view w) { return w == "(" || w == "[" || w == "{" || w == "$"; }

// Detokenizes one paragraph's tokens (tags already stripped, quotes marked).
struct Para {
  std::string text;
  bool glue_next = true;   // no space before the next token (start of paragraph)
  bool single_open = false;  // parity of lone ' quotes
  void add(std::string_view tok) {
    std::string_view w = tok;
    bool before = true, after = false;  // space before this token? glue the next one?
    if (w == "``") { w = "\""; after = true; }
    else if (w == "''") { w = "\""; before = false; }
    else if (w == "'") {
      single_open = !single_open;
      if (single_open) after = true;
      else before = false;
    } else if (w == "." && !text.empty() && text.back() == '.') {
      return;  // "Jr./np ./." -> "Jr." (abbreviation ending a sentence)
    } else {
      before = !no_space_before(w);
      after = no_space_after(w);
    }
    if (!text.empty() && before && !glue_next) text.push_back(' ');
    if (w.size() > 2 && (w.find("''") != w.npos || w.find("``") != w.npos)) {
      for (size_t i = 0; i < w.size(); ++i) {  // inch marks inside words (1/4''): quotes too
        bool quote = i + 1 < w.size() && w[i] == w[i + 1] && (w[i] == '\'' || w[i] == '`');
        text.push_back(quote ? '"' : w[i]);
        i += quote;
      }
    } else {
      text.append(w);
    }
    glue_next = after;
  }
};

// The line of text starting at pos (without its '\n'); moves pos past it.
std::string_view next_line(std::string_view text, size_t& pos) {
  size_t eol = text.find('\n', pos);
  if (eol == std::string_view::npos) eol = text.size();
  const std::string_view line = text.substr(pos, eol - pos);
  pos = eol + 1;
  return line;
}

}  // namespace

bool looks_like_brown(std::string_view text) {
  size_t tokens = 0, tagged = 0, lines = 0;
  size_t pos = 0;
  while (pos < text.size() && lines < 100) {
    const std::string_view line = next_line(text, pos);
    auto toks = split_ws(line);
    if (toks.empty()) continue;
    ++lines;
    for (std::string_view t : toks) {
      ++tokens;
      auto [w, tag] = split_tag(t);
      if (!w.empty() && !tag.empty() && std::all_of(tag.begin(), tag.end(), is_tag_char)) ++tagged;
    }
  }
  return tokens >= 10 && tagged * 10 >= tokens * 9;
}

std::string brown_detokenize(std::string_view file_text) {
  std::vector<std::string> paras;
  Para cur;
  bool prev_headline = false;
  size_t pos = 0;
  auto close = [&] {
    if (!cur.text.empty()) paras.push_back(std::move(cur.text));
    cur = Para();
  };
  while (pos < file_text.size()) {
    const std::string_view line = next_line(file_text, pos);
    auto toks = split_ws(line);
    if (toks.empty()) continue;
    bool headline = std::all_of(toks.begin(), toks.end(), [](std::string_view t) {
      std::string_view tag = split_tag(t).second;
      return tag.size() >= 3 && tag.substr(tag.size() - 3) == "-hl";
    });
    if (line[0] == '\t' || headline || prev_headline) close();
    cur.single_open = false;  // lone ' quotes pair up within a sentence (line)
    for (std::string_view t : toks) cur.add(split_tag(t).first);
    prev_headline = headline;
  }
  close();
  std::string out;
  for (size_t i = 0; i < paras.size(); ++i) {
    if (i) out += "\n\n";
    out += paras[i];
  }
  if (!out.empty()) out += "\n";
  return out;
}

}  // namespace ms
