// Fuzz target: the stop-string holdback of streamed text (StopChecker), which the SSE writer
// relies on. The input is split into stop strings and text pieces fed one by one. Invariants
// checked on every input: the output is a prefix of the text; it never contains a stop string
// (unless asked to include it, then it ends with the one that stopped it); without a stop it is
// the whole text once flushed; nothing comes out after a stop.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/stop_checker.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const bool include = data[0] & 1;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  // "stop1\x01stop2\x01...\x02text piece\x03text piece..." (missing parts are empty).
  std::vector<std::string> stops;
  const size_t text_at = rest.find('\x02');
  std::string_view stop_part = rest.substr(0, text_at);
  while (!stop_part.empty() && stops.size() < 4) {
    const size_t cut = stop_part.find('\x01');
    if (cut != 0) stops.emplace_back(stop_part.substr(0, cut));
    if (cut == std::string_view::npos) break;
    stop_part.remove_prefix(cut + 1);
  }
  std::vector<std::string_view> pieces;
  std::string text;
  if (text_at != std::string_view::npos) {
    std::string_view t = rest.substr(text_at + 1);
    while (!t.empty()) {
      const size_t cut = t.find('\x03');
      pieces.push_back(t.substr(0, cut));
      text += t.substr(0, cut);
      if (cut == std::string_view::npos) break;
      t.remove_prefix(cut + 1);
    }
  }
  tf::StopChecker checker(stops, include);
  std::string out;
  for (auto p : pieces) {
    const bool was_stopped = checker.stopped();
    const std::string got = checker.push(p);
    if (was_stopped && !got.empty()) std::abort();  // nothing after a stop
    out += got;
  }
  if (!checker.stopped()) out += checker.flush();
  if (text.compare(0, out.size(), out) != 0) std::abort();  // a prefix of the text
  for (const auto& s : stops) {
    const size_t at = out.find(s);
    if (at == std::string::npos) continue;
    // Only the stop string that ended it, at the very end, and only when included.
    if (!include || !checker.stopped() || at + s.size() < out.size() - checker.matched().size())
      std::abort();
  }
  if (!checker.stopped() && out != text) std::abort();  // nothing lost without a stop
  return 0;
}
