#include "chat/harmony.h"

#include <algorithm>
#include <array>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/random_id.h"
#include "sampling/grammar.h"
#include "sampling/json_schema.h"
#include "sampling/regex_grammar.h"

namespace tf {
namespace {

constexpr std::string_view kStart = "<|start|>", kChannel = "<|channel|>", kMessage = "<|message|>",
                           kConstrain = "<|constrain|>";
constexpr std::array<std::string_view, 3> kEnds = {"<|end|>", "<|call|>", "<|return|>"};
constexpr std::array<std::string_view, 7> kMarkers = {"<|start|>",     "<|channel|>", "<|message|>",
                                                      "<|constrain|>", "<|end|>",     "<|call|>",
                                                      "<|return|>"};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

// A header (between <|start|> and <|message|>) as words, <|channel|> and <|constrain|> words of
// their own: the role first, "to=R" anywhere, the word after <|channel|> the channel, the word
// after <|constrain|> (or a bare word after the channel: "commentary json") the content type.
void read_header(std::string_view h, HarmonyMessage& m) {
  std::vector<std::string_view> words;
  for (size_t at = 0; at < h.size();) {
    if (h[at] == ' ' || h[at] == '\n') {
      ++at;
      continue;
    }
    size_t len = 0;
    for (std::string_view mk : {kChannel, kConstrain})
      if (h.compare(at, mk.size(), mk) == 0) len = mk.size();
    if (len == 0) {
      len = 1;
      while (at + len < h.size() && h[at + len] != ' ' && h[at + len] != '\n' &&
             h.compare(at + len, 2, "<|") != 0)
        ++len;
    }
    words.push_back(h.substr(at, len));
    at += len;
  }
  bool after_channel = false;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string_view w = words[i];
    if (w.rfind("to=", 0) == 0) {
      m.recipient = std::string(w.substr(3));
    } else if ((w == kChannel || w == kConstrain) && i + 1 < words.size()) {
      std::string& field = w == kChannel ? m.channel : m.content_type;
      field = std::string(words[++i]);
      after_channel = w == kChannel;
    } else if (after_channel && m.content_type.empty()) {
      m.content_type = std::string(w);
    }
  }
}

// Where the body starting at `from` ends: the first end marker (its length in len), or npos.
size_t body_end(std::string_view text, size_t from, size_t& len) {
  size_t best = std::string_view::npos;
  len = 0;
  for (std::string_view e : kEnds) {
    const size_t p = text.find(e, from);
    if (p < best) best = p, len = e.size();
  }
  return best;
}

}  // namespace

std::vector<HarmonyMessage> parse_harmony(std::string_view text) {
  std::vector<HarmonyMessage> out;
  size_t at = 0;
  while (at < text.size()) {
    // A message's header starts at <|start|> or <|channel|> (the prompt ended with
    // "<|start|>assistant"); text before one is kept as a message of no channel.
    const size_t s = std::min(text.find(kStart, at), text.find(kChannel, at));
    if (s == std::string_view::npos || s > at) {
      const std::string_view stray =
          text.substr(at, s == std::string_view::npos ? text.npos : s - at);
      if (!trim(stray).empty()) out.push_back({"", "", "", std::string(stray), true});
      if (s == std::string_view::npos) break;
      at = s;
    }
    const size_t body = text.find(kMessage, at);
    if (body == std::string_view::npos) {  // a header not yet closed
      out.push_back({"", "", "", std::string(text.substr(at)), false});
      out.back().channel = "\x01header";
      break;
    }
    HarmonyMessage m;
    size_t h = at;
    if (text.compare(h, kStart.size(), kStart) == 0) h += kStart.size();
    read_header(text.substr(h, body - h), m);
    size_t len = 0;
    const size_t end = body_end(text, body + kMessage.size(), len);
    m.body = std::string(text.substr(body + kMessage.size(), end == std::string_view::npos
                                                                 ? text.npos
                                                                 : end - body - kMessage.size()));
    m.complete = end != std::string_view::npos;
    out.push_back(std::move(m));
    if (end == std::string_view::npos) break;
    at = end + len;
  }
  return out;
}

namespace {

void append(std::string& to, bool& has, std::string_view piece) {
  if (has) to += '\n';
  to += piece;
  has = true;
}

// A call's arguments: the body if it is a JSON object (re-serialized compactly), else nullopt.
std::optional<std::string> json_arguments(std::string_view body) {
  nlohmann::json j = nlohmann::json::parse(trim(body), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j.dump();
}

HarmonySplit split_messages(const std::vector<HarmonyMessage>& msgs,
                            const std::vector<std::string>& names, bool streaming) {
  HarmonySplit s;
  for (const HarmonyMessage& m : msgs) {
    if (m.channel == "\x01header") {
      if (!streaming && !trim(m.body).empty()) append(s.content, s.has_content, m.body);
      continue;
    }
    if (m.channel == "analysis") {
      append(s.reasoning, s.has_reasoning, m.body);
      continue;
    }
    if (!m.recipient.empty()) {
      const std::string_view r = m.recipient;
      const bool fn = r.rfind("functions.", 0) == 0 &&
                      std::find(names.begin(), names.end(), r.substr(10)) != names.end();
      if (streaming) continue;  // decided when the turn is whole
      if (fn) {
        if (auto args = json_arguments(m.body)) {
          s.calls.push_back({random_id("call_"), std::string(r.substr(10)), *args});
          continue;
        }
      }
      append(s.content, s.has_content, m.body);  // not a call of an offered tool: as written
      continue;
    }
    append(s.content, s.has_content, m.body);  // final, a preamble, or text of no channel
  }
  return s;
}

}  // namespace

namespace {

// One analysis message before the constrained part, ending where the next header begins.
constexpr std::string_view kAnalysisGbnf =
    "harmony-analysis ::= <|channel|> \"analysis\" <|message|> harmony-thought <|end|> <|start|> "
    "\"assistant\"\n"
    "harmony-thought ::= .*\n";

}  // namespace

std::string harmony_call_grammar(const std::vector<std::string>& names,
                                 const std::vector<nlohmann::ordered_json>& parameters) {
  if (names.empty() || names.size() != parameters.size())
    fail("harmony_call_grammar: no tool to call");
  std::string root = "root ::= harmony-analysis? <|channel|> \"commentary to=functions.\" (";
  std::string rules;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string prefix = fmt::format("tool{}-", i);
    root +=
        fmt::format("{}{} harmony-args {}root", i ? " | " : " ", gbnf_literal(names[i]), prefix);
    rules += gbnf_prefix_rules(json_schema_to_gbnf(parameters[i]), prefix);
  }
  root += " )\n";
  return root + "harmony-args ::= \" \" <|constrain|>? \"json\" <|message|>\n" +
         std::string(kAnalysisGbnf) + rules;
}

std::string harmony_final_grammar(const std::string& gbnf) {
  return "root ::= harmony-analysis? <|channel|> \"final\" <|message|> out-root\n" +
         std::string(kAnalysisGbnf) + gbnf_prefix_rules(gbnf, "out-");
}

HarmonySplit split_harmony(std::string_view text, const std::vector<std::string>& names) {
  return split_messages(parse_harmony(text), names, false);
}

HarmonyStream::Delta HarmonyStream::settled(bool final) {
  // Hold back a tail that may be the start of a marker ("<|en" of "<|end|>").
  size_t keep = all_.size();
  if (!final) {
    const size_t lt = all_.rfind('<');
    if (lt != std::string::npos && all_.size() - lt < 16) {
      const std::string_view tail = std::string_view(all_).substr(lt);
      for (std::string_view mk : kMarkers)
        if (mk.substr(0, std::min(mk.size(), tail.size())) == tail && tail.size() < mk.size())
          keep = lt;
    }
  }
  const HarmonySplit s =
      split_messages(parse_harmony(std::string_view(all_).substr(0, keep)), {}, true);
  Delta d;
  if (s.reasoning.size() > sent_reasoning_) {
    d.reasoning = s.reasoning.substr(sent_reasoning_);
    sent_reasoning_ = s.reasoning.size();
  }
  if (s.content.size() > sent_content_) {
    d.content = s.content.substr(sent_content_);
    sent_content_ = s.content.size();
  }
  return d;
}

HarmonyStream::Delta HarmonyStream::push(std::string_view text) {
  all_ += text;
  return settled(false);
}

HarmonySplit HarmonyStream::finish(const std::vector<std::string>& names, Delta& rest) {
  rest = settled(true);
  HarmonySplit whole = split_harmony(all_, names);
  // What streaming left out (a recipient's body that is not a call, a stray header) comes last.
  if (whole.content.size() > sent_content_) rest.content += whole.content.substr(sent_content_);
  return whole;
}

}  // namespace tf
