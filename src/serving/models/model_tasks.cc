#include "serving/models/model_tasks.h"

#include <fmt/format.h>

#include "core/error.h"
#include "model/model_config.h"
#include "serving/core/api_common.h"
#include "serving/models/served_model.h"

namespace tf {
namespace {

constexpr ModelTask kAllTasks[] = {ModelTask::kGenerate, ModelTask::kEmbed, ModelTask::kScore,
                                   ModelTask::kClassify};

uint8_t bit(ModelTask t) {
  return static_cast<uint8_t>(t);
}

// The id of a word the vocabulary holds as one token (the reranker's "yes" and "no").
int32_t single_token(const ServedModel& m, const char* word) {
  const std::vector<int32_t> ids = m.tok()->encode(word, false);
  if (ids.size() != 1)
    fail(ErrorKind::kInvalidArgument,
         "model '{}' cannot score as a reranker: \"{}\" is {} tokens in its vocabulary, not one",
         m.name, word, ids.size());
  return ids[0];
}

}  // namespace

uint8_t default_tasks(const ModelConfig& c) {
  if (c.encoder_only())
    return c.classifier == ModelConfig::Classifier::kNone
               ? bit(ModelTask::kEmbed)
               : static_cast<uint8_t>(bit(ModelTask::kScore) | bit(ModelTask::kClassify));
  if (c.encoder_decoder()) return bit(ModelTask::kGenerate);
  return static_cast<uint8_t>(bit(ModelTask::kGenerate) | bit(ModelTask::kEmbed));
}

ModelTask parse_task(std::string_view name) {
  if (name == "generate") return ModelTask::kGenerate;
  if (name == "embed" || name == "embedding") return ModelTask::kEmbed;
  if (name == "score" || name == "rerank") return ModelTask::kScore;
  if (name == "classify") return ModelTask::kClassify;
  fail(ErrorKind::kInvalidArgument, "task '{}' is not one of generate, embed, score, classify",
       name);
}

const char* task_name(ModelTask t) {
  switch (t) {
    case ModelTask::kGenerate:
      return "generate";
    case ModelTask::kEmbed:
      return "embed";
    case ModelTask::kScore:
      return "score";
    case ModelTask::kClassify:
      return "classify";
  }
  return "?";
}

std::string tasks_text(uint8_t tasks) {
  std::string out;
  for (ModelTask t : kAllTasks) {
    if (!(tasks & bit(t))) continue;
    if (!out.empty()) out += ", ";
    out += task_name(t);
  }
  return out.empty() ? "none" : out;
}

void apply_task(ServedModel& m, ModelTask task) {
  const ModelConfig& c = m.config();
  const bool classifier = c.encoder_only() && c.classifier != ModelConfig::Classifier::kNone;
  switch (task) {
    case ModelTask::kGenerate:
      if (c.encoder_only())
        fail(ErrorKind::kInvalidArgument, "model '{}' ({}) is an encoder: it cannot generate",
             m.name, c.architecture);
      m.tasks = bit(task);
      return;
    case ModelTask::kEmbed:
      if (c.encoder_decoder())
        fail(ErrorKind::kInvalidArgument,
             "model '{}' ({}) is an encoder-decoder: it does not embed", m.name, c.architecture);
      m.tasks = bit(task);
      return;
    case ModelTask::kClassify:
      if (!classifier)
        fail(ErrorKind::kInvalidArgument,
             "model '{}' ({}) has no classifier head: it cannot classify", m.name, c.architecture);
      m.tasks = static_cast<uint8_t>(bit(ModelTask::kClassify) | bit(ModelTask::kScore));
      return;
    case ModelTask::kScore:
      if (classifier) {
        m.tasks = static_cast<uint8_t>(bit(ModelTask::kClassify) | bit(ModelTask::kScore));
        return;
      }
      if (c.encoder_only() || c.encoder_decoder())
        fail(ErrorKind::kInvalidArgument,
             "model '{}' ({}) has no classifier head: it cannot score pairs", m.name,
             c.architecture);
      if (!m.tok())
        fail(ErrorKind::kInvalidArgument,
             "model '{}' has no tokenizer: a generator scores pairs as a reranker through its "
             "\"yes\" and \"no\" tokens",
             m.name);
      m.score_tokens = {single_token(m, "no"), single_token(m, "yes")};
      m.tasks = bit(ModelTask::kScore);
      return;
  }
}

void require_task(const ServedModel& m, ModelTask task) {
  if (m.tasks & bit(task)) return;
  throw HttpError(400,
                  fmt::format("model '{}' does not {} (its tasks: {}; the server's --task sets "
                              "a model's task)",
                              m.name, task_name(task), tasks_text(m.tasks)),
                  "", "model");
}

}  // namespace tf
