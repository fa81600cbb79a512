#include "chat/harmony.h"

#include <algorithm>
#include <array>
#include <span>

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

// What comes before the constrained message: an optional analysis message, or, when the prompt
// opened one, the rest of it.
std::string harmony_prelude(bool analysis_open) {
  return analysis_open ? "harmony-thought <|end|> <|start|> \"assistant\"" : "harmony-analysis?";
}

}  // namespace

std::string harmony_call_grammar(const std::vector<std::string>& names,
                                 const std::vector<nlohmann::ordered_json>& parameters,
                                 bool analysis_open) {
  if (names.empty() || names.size() != parameters.size())
    fail("harmony_call_grammar: no tool to call");
  std::string root =
      "root ::= " + harmony_prelude(analysis_open) + " <|channel|> \"commentary to=functions.\" (";
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

std::string harmony_final_grammar(const std::string& gbnf, bool analysis_open) {
  return "root ::= " + harmony_prelude(analysis_open) +
         " <|channel|> \"final\" <|message|> out-root\n" + std::string(kAnalysisGbnf) +
         gbnf_prefix_rules(gbnf, "out-");
}

HarmonySplit split_harmony(std::string_view text, const std::vector<std::string>& names,
                           bool analysis_open) {
  if (analysis_open)
    return split_messages(parse_harmony(std::string(kHarmonyAnalysisOpen) + std::string(text)),
                          names, false);
  return split_messages(parse_harmony(text), names, false);
}

HarmonyStream::HarmonyStream(bool analysis_open)
    : all_(analysis_open ? kHarmonyAnalysisOpen : "") {}

namespace {

// Where the first of `marks` is in text from `from` (npos: none); its length in len.
size_t find_first(std::string_view text, size_t from, std::span<const std::string_view> marks,
                  size_t& len) {
  size_t best = std::string_view::npos;
  for (std::string_view m : marks) {
    const size_t p = text.find(m, from);
    if (p < best) best = p, len = m.size();
  }
  return best;
}

// Which part of a streamed answer a message's body goes to (nullptr: none while streaming).
std::pair<std::string*, bool*> target(HarmonySplit& s, const HarmonyMessage& m) {
  if (m.channel == "analysis") return {&s.reasoning, &s.has_reasoning};
  if (!m.recipient.empty()) return {nullptr, nullptr};  // decided when the turn is whole
  return {&s.content, &s.has_content};
}

constexpr size_t kLongestMarker = 13;  // "<|constrain|>"

}  // namespace

HarmonyStream::Delta HarmonyStream::settled(bool final) {
  // Hold back a tail that may be the start of a marker ("<|en" of "<|end|>").
  size_t keep = all_.size();
  if (!final) {
    const size_t lo = all_.size() > 15 ? all_.size() - 15 : 0;  // (not the whole answer)
    const size_t in_tail = std::string_view(all_).substr(lo).rfind('<');
    const size_t lt = in_tail == std::string_view::npos ? in_tail : lo + in_tail;
    if (lt != std::string::npos) {
      const std::string_view tail = std::string_view(all_).substr(lt);
      for (std::string_view mk : kMarkers)
        if (mk.substr(0, std::min(mk.size(), tail.size())) == tail && tail.size() < mk.size())
          keep = lt;
    }
  }
  const std::string_view text = std::string_view(all_).substr(0, keep);
  // Settle what is whole, as parse_harmony reads it: text before a header runs to the next
  // header, a header to its <|message|>, a body to its end marker.
  static constexpr std::array<std::string_view, 2> kHeaders = {kStart, kChannel};
  for (;;) {
    if (open_) {
      size_t len = 0;
      const size_t from =
          std::max(body_from_, searched_ > kLongestMarker ? searched_ - kLongestMarker : 0);
      const size_t end =
          stray_ ? find_first(text, from, kHeaders, len) : find_first(text, from, kEnds, len);
      if (end == std::string_view::npos) {
        searched_ = text.size();
        break;
      }
      open_->body = std::string(text.substr(body_from_, end - body_from_));
      open_->complete = true;
      if (!stray_ || !trim(open_->body).empty()) {
        auto [to, has] = target(done_, *open_);
        if (to) append(*to, *has, open_->body);
      }
      parsed_ = stray_ ? end : end + len;
      open_.reset();
      continue;
    }
    if (parsed_ >= text.size()) break;
    size_t len = 0;
    const size_t s = find_first(text, parsed_, kHeaders, len);
    if (s != parsed_) {  // text before a header
      open_ = HarmonyMessage{};
      stray_ = true;
      body_from_ = searched_ = parsed_;
      continue;
    }
    const size_t body = text.find(kMessage, parsed_);
    if (body == std::string_view::npos) break;  // a header not yet closed
    HarmonyMessage m;
    size_t h = parsed_;
    if (text.compare(h, kStart.size(), kStart) == 0) h += kStart.size();
    read_header(text.substr(h, body - h), m);
    open_ = std::move(m);
    stray_ = false;
    body_from_ = searched_ = body + kMessage.size();
  }
  // What is settled now: done_, then the open message's body so far; sent as what follows
  // what was sent.
  Delta d;
  auto emit = [](const std::string& done, bool has, std::string_view partial, bool with,
                 size_t& sent, std::string& out) {
    // The stream's text: done (+ "\n" + partial when both are there, or partial alone).
    const size_t sep = with && has ? 1 : 0;
    const size_t total = done.size() + sep + (with ? partial.size() : 0);
    if (total <= sent) return;
    if (sent < done.size()) {
      out += std::string_view(done).substr(sent);
      sent = done.size();
    }
    if (sep && sent == done.size()) {
      out += '\n';
      ++sent;
    }
    if (with) {
      const size_t at = sent - done.size() - sep;
      out += partial.substr(at);
      sent = total;
    }
  };
  std::string_view partial;
  bool to_reasoning = false, to_content = false;
  if (open_) {
    partial = text.substr(body_from_);
    if (stray_) {
      to_content = !trim(partial).empty();
    } else {
      to_reasoning = open_->channel == "analysis";
      to_content = !to_reasoning && open_->recipient.empty();
    }
  }
  emit(done_.reasoning, done_.has_reasoning, partial, to_reasoning, sent_reasoning_, d.reasoning);
  emit(done_.content, done_.has_content, partial, to_content, sent_content_, d.content);
  return d;
}

HarmonyStream::Delta HarmonyStream::push(std::string_view text) {
  all_ += text;
  return settled(false);
}

HarmonySplit HarmonyStream::finish(const std::vector<std::string>& names, Delta& rest) {
  rest = settled(true);
  HarmonySplit whole = split_harmony(all_, names);  // (all_ holds an opened thought's marker)
  // What streaming left out (a recipient's body that is not a call, a stray header) comes last.
  if (whole.content.size() > sent_content_) rest.content += whole.content.substr(sent_content_);
  return whole;
}

}  // namespace tf
