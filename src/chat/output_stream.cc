#include "chat/output_stream.h"

namespace tf {

ChatOutputStream::ChatOutputStream(bool reasoning, bool opened, std::optional<ToolFormat> tools,
                                   std::vector<std::string> names, bool harmony)
    : names_(std::move(names)) {
  if (harmony) {
    harmony_.emplace(opened);
    return;
  }
  if (reasoning) reasoning_.emplace(opened);
  if (tools) tools_.emplace(*tools);
}

ChatOutputStream::Delta ChatOutputStream::push(std::string_view text, bool done) {
  Delta d;
  if (harmony_) {
    HarmonyStream::Delta h = harmony_->push(text);
    if (done) {
      HarmonyStream::Delta rest;
      d.calls = harmony_->finish(names_, rest).calls;
      h.reasoning += rest.reasoning;
      h.content += rest.content;
    }
    d.reasoning = std::move(h.reasoning);
    d.content = std::move(h.content);
    return d;
  }
  d.content = std::string(text);
  if (reasoning_) {
    ReasoningStream::Delta r = reasoning_->push(text);
    if (done) {
      const ReasoningStream::Delta f = reasoning_->finish();
      r.reasoning += f.reasoning;
      r.content += f.content;
    }
    d.reasoning = std::move(r.reasoning);
    d.content = std::move(r.content);
  }
  if (tools_) {
    d.content = tools_->push(d.content);
    if (done) {
      std::string rest;
      d.calls = tools_->finish(names_, rest).calls;
      d.content += rest;
    }
  }
  return d;
}

ChatAnswerShape::Whole ChatAnswerShape::split(std::string_view text) const {
  Whole w;
  if (tool_format == ToolFormat::kHarmony) {
    HarmonySplit h = split_harmony(text, tools ? tools->names : std::vector<std::string>{}, opened);
    if (h.has_reasoning) w.reasoning = std::move(h.reasoning);
    if (h.has_content || (!h.has_reasoning && h.calls.empty())) w.content = std::move(h.content);
    w.calls = std::move(h.calls);
    return w;
  }
  std::string content(text);
  if (reasoning) {
    ReasoningSplit r = split_reasoning(text, opened);
    w.reasoning = std::move(r.reasoning);
    content = std::move(r.content);
  }
  if (tools) {
    ParsedToolOutput p = parse_tool_calls(content, tool_format, tools->names);
    w.content = std::move(p.content);
    w.calls = std::move(p.calls);
  } else if (!content.empty() || !w.reasoning) {
    w.content = std::move(content);
  }
  return w;
}

ChatOutputStream ChatAnswerShape::stream() const {
  return ChatOutputStream(
      reasoning, opened, tools ? std::optional<ToolFormat>(tool_format) : std::nullopt,
      tools ? tools->names : std::vector<std::string>{}, tool_format == ToolFormat::kHarmony);
}

}  // namespace tf
