#include "chat/reasoning.h"

#include <algorithm>

#include "chat/text_trim.h"

namespace tf {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

// The length of the longest suffix of s that is a proper prefix of marker.
size_t partial_suffix(std::string_view s, std::string_view marker) {
  for (size_t k = std::min(marker.size() - 1, s.size()); k > 0; --k)
    if (s.substr(s.size() - k) == marker.substr(0, k)) return k;
  return 0;
}

}  // namespace

bool template_reasons(std::string_view template_source) {
  return template_source.find(kOpen) != std::string_view::npos;
}

bool prompt_opens_thinking(std::string_view prompt_text) {
  const std::string_view t = rtrim(prompt_text);
  return t.size() >= kOpen.size() && t.substr(t.size() - kOpen.size()) == kOpen;
}

ReasoningSplit split_reasoning(std::string_view text, bool opened) {
  std::string_view body = text;
  if (!opened) {
    const std::string_view t = ltrim(text);
    if (t.substr(0, kOpen.size()) != kOpen) return {std::nullopt, std::string(text)};
    body = t.substr(kOpen.size());
  }
  const size_t close = body.find(kClose);
  if (close == std::string_view::npos) return {std::string(body), ""};
  return {std::string(body.substr(0, close)),
          std::string(ltrim(body.substr(close + kClose.size())))};
}

ReasoningStream::Delta ReasoningStream::push(std::string_view text) {
  Delta d;
  held_ += text;
  while (true) {
    if (state_ == kStart) {
      const std::string_view t = ltrim(held_);
      if (t.size() < kOpen.size() && kOpen.substr(0, t.size()) == t) return d;  // undecided
      if (t.substr(0, kOpen.size()) == kOpen) {
        held_ = std::string(t.substr(kOpen.size()));
        state_ = kThinking;
        continue;
      }
      state_ = kContent;  // no think block: all content, as written
      d.content += held_;
      held_.clear();
      return d;
    }
    if (state_ == kThinking) {
      const size_t close = held_.find(kClose);
      if (close != std::string::npos) {
        d.reasoning += held_.substr(0, close);
        held_ = held_.substr(close + kClose.size());
        state_ = kContent;
        after_think_ = true;
        continue;
      }
      const size_t keep = partial_suffix(held_, kClose);
      d.reasoning += held_.substr(0, held_.size() - keep);
      held_ = held_.substr(held_.size() - keep);
      return d;
    }
    // kContent
    if (after_think_) {
      const std::string_view t = ltrim(held_);
      if (t.empty()) {
        held_.clear();
        return d;
      }
      held_ = std::string(t);
      after_think_ = false;
    }
    d.content += held_;
    held_.clear();
    return d;
  }
}

ReasoningStream::Delta ReasoningStream::finish() {
  Delta d;
  if (state_ == kThinking) {
    d.reasoning = held_;
  } else if (state_ == kStart) {
    // Only a prefix of "<think>" (or whitespace) came: as written, it is content.
    d.content = held_;
  } else if (!after_think_) {
    d.content = held_;
  }
  held_.clear();
  return d;
}

}  // namespace tf
