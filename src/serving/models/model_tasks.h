#pragma once
// What a served model does (vLLM's tasks): generate, embed, score (rerank and /score pairs),
// classify. Told from its config: a generator generates and embeds its prompts (last-token or
// mean pooling); an encoder embeds; an encoder with a sequence-classification head scores and
// classifies. The operator's --task narrows a model to one task, or makes a generator a
// reranker (Qwen3-Reranker's way: a pair's relevance is the probability of "yes" against "no"
// after the pair in the reranker's prompt).

#include <cstdint>
#include <string>
#include <string_view>

namespace tf {

struct ServedModel;
struct ModelConfig;

enum class ModelTask : uint8_t { kGenerate = 1, kEmbed = 2, kScore = 4, kClassify = 8 };

// The tasks a config tells, as a mask of ModelTask bits.
uint8_t default_tasks(const ModelConfig& c);
// "generate", "embed", "score" (also "rerank"), "classify"; an Error naming the others.
ModelTask parse_task(std::string_view name);
const char* task_name(ModelTask t);
// "generate, embed": the tasks of a mask, in that order.
std::string tasks_text(uint8_t tasks);

// Gives m the one task the operator named (--task). A generator asked to score takes its
// "yes" / "no" tokens from its vocabulary (each must be one token); an encoder cannot generate;
// only a model with a classifier head classifies. Throws Error saying why not.
void apply_task(ServedModel& m, ModelTask task);

// Throws HttpError 400 when m does not serve task: "model 'x' does not <task> (its tasks: ...)".
void require_task(const ServedModel& m, ModelTask task);

}  // namespace tf
