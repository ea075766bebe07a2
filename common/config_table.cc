#include "common/config_table.h"

#include <sstream>
#include <vector>

#include "common/duration.h"

namespace clusterd::config_table {
namespace {

// `text` wrapped to lines of at most `width` characters, every line after the
// first indented by `indent` spaces. A word longer than a line (a list's
// default) is broken after its commas.
std::string Wrap(const std::string& text, size_t first_column, size_t indent, size_t width) {
  std::string out;
  size_t column = first_column;
  std::istringstream words(text);
  std::string word;
  bool first = true;
  while (words >> word) {
    // The word's pieces: itself, or its comma-ended parts when it is too long.
    std::vector<std::string> pieces;
    if (indent + word.size() > width) {
      size_t start = 0;
      while (start < word.size()) {
        const size_t comma = word.find(',', start);
        const size_t end = comma == std::string::npos ? word.size() : comma + 1;
        pieces.push_back(word.substr(start, end - start));
        start = end;
      }
    } else {
      pieces.push_back(word);
    }
    for (size_t i = 0; i < pieces.size(); ++i) {
      const std::string& piece = pieces[i];
      const size_t gap = first || i > 0 ? 0 : 1;
      if (!first && column + gap + piece.size() > width) {
        out += "\n" + std::string(indent, ' ');
        column = indent;
      } else if (gap) {
        out += ' ';
        ++column;
      }
      out += piece;
      column += piece.size();
      first = false;
    }
  }
  return out;
}

// A markdown table cell: no line breaks, '|' escaped.
std::string Cell(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (ch == '|')
      out += "\\|";
    else if (ch == '\n')
      out += ' ';
    else
      out += ch;
  }
  return out;
}

// "text." with a capital first letter, for a table of sentences.
std::string Sentence(std::string text) {
  if (!text.empty() && text[0] >= 'a' && text[0] <= 'z') text[0] = static_cast<char>(text[0] - 'a' + 'A');
  return text + ".";
}

}  // namespace

std::string ShowDuration(std::chrono::nanoseconds d) { return d.count() == 0 ? std::string("0s") : FormatDuration(d); }

Status SetText(const std::string& v, std::string* out) {
  for (unsigned char ch : v) {
    if (ch < 0x20 || ch == 0x7f) return InvalidArgument("\"" + v + "\" has a control character");
  }
  *out = v;
  return Status::Ok();
}

std::string FlagOf(const std::string& key) {
  std::string flag = key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return "--" + flag;
}

std::string Usage(const std::vector<KeyDoc>& keys, const std::string& head, const std::string& tail) {
  constexpr size_t kHelpColumn = 30, kWidth = 100;
  std::string out = head;
  std::string section;
  for (const KeyDoc& k : keys) {
    if (k.section != section) {
      section = k.section;
      out += section + ":\n";
    }
    std::string line = "  " + FlagOf(k.name) + (k.value_name.empty() ? "" : " " + k.value_name);
    std::string help = k.help;
    std::string notes;
    if (!k.default_value.empty()) notes = "default " + k.default_value;
    if (k.accepted_in_help) notes += (notes.empty() ? "" : "; ") + k.accepted;
    if (!notes.empty()) help += " (" + notes + ")";
    if (line.size() + 1 > kHelpColumn) {
      out += line + "\n" + std::string(kHelpColumn, ' ');
    } else {
      out += line + std::string(kHelpColumn - line.size(), ' ');
    }
    out += Wrap(help, kHelpColumn, kHelpColumn, kWidth) + "\n";
  }
  return out + tail;
}

std::string Reference(const std::vector<KeyDoc>& keys) {
  std::string out;
  std::string section;
  for (const KeyDoc& k : keys) {
    if (k.section != section) {
      section = k.section;
      out += (out.empty() ? "" : "\n") + std::string("### ") + section + "\n\n";
      out += "| Key (flag) | Default | Accepted | Helm value | Meaning |\n|---|---|---|---|---|\n";
    }
    const std::string chart =
        k.chart_value.find(' ') == std::string::npos ? "`" + k.chart_value + "`" : Cell(k.chart_value);
    out += "| `" + k.name + "` (`" + FlagOf(k.name) + "`) | " +
           (k.default_value.empty() ? "—" : "`" + Cell(k.default_value) + "`") + " | " + Cell(k.accepted) + " | " +
           chart + " | " + Cell(Sentence(k.help)) + " |\n";
  }
  return out;
}

}  // namespace clusterd::config_table
