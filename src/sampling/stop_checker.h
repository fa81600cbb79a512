#pragma once
// Stop strings over streamed text. A stop string may span several tokens, so text that could
// still turn out to be the start of one is held back until it is decided; the stop string itself
// is not part of the output (OpenAI semantics) unless asked for.

#include <string>
#include <string_view>
#include <vector>

namespace tf {

class StopChecker {
 public:
  explicit StopChecker(std::vector<std::string> stop, bool include_stop_in_output = false);

  // Feeds newly decoded text; returns the text that is now safe to show. After a stop string
  // is seen, stopped() is true and later calls return nothing.
  std::string push(std::string_view text);
  // End of the sequence (length, EOS): releases whatever was held back.
  std::string flush();

  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop string that ended it

 private:
  std::vector<std::string> stop_;
  bool include_;
  std::string pending_;  // undecided text
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace tf
