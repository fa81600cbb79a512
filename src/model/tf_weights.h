#pragma once
// Hugging Face TensorFlow checkpoints: the `tf_model.h5` that `TF*ForCausalLM.save_pretrained`
// writes (Keras's HDF5 weights format: the root's `layer_names`, each layer group's
// `weight_names`, one dataset per weight under its TF name; or the shards listed in
// `tf_model.h5.index.json`), read with Debian's libhdf5. Each weight is registered under the
// PyTorch name transformers' own TF-to-PyTorch conversion gives it (Keras Dense kernels, stored
// [in, out], transposed to [out, in]), so that the architectures' safetensors loaders take them.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "model/weight_store.h"

namespace tf {

// A TF weight name ("tfgp_t2lm_head_model/transformer/h_._0/attn/c_attn/weight:0") as the
// PyTorch name ("transformer.h.0.attn.c_attn.weight"), and whether its array is transposed
// (transformers' convert_tf_weight_name_to_pt_weight_name).
struct PtName {
  std::string name;
  bool transpose = false;
};
PtName tf_to_pt_name(const std::string& tf_name);

// A TF variable as PyTorch holds it, for both readers (tf_model.h5, SavedModel variables): its
// name, its shape (a Dense kernel [in, out] as [out, in]: transpose; TFConv1D's [1, nf] bias as
// [nf]). Throws Error naming where and the variable for a kernel that is not 2-D.
struct PtTensor {
  std::string name;
  Shape shape;
  bool transpose = false;
};
PtTensor pt_tensor(const std::string& tf_name, const Shape& stored, const std::string& where);
// A row-major [rows, cols] matrix as [cols, rows].
std::vector<float> transposed(const std::vector<float>& values, int64_t rows, int64_t cols);

// True when dir holds a TensorFlow checkpoint tokenflow reads (tf_model.h5 or its index).
bool has_tf_h5(const std::string& dir);
// Loads dir/tf_model.h5 (or the shards of dir/tf_model.h5.index.json) into store as f32.
// Throws Error naming the file and the weight on anything malformed.
void load_tf_h5_dir(const std::string& dir, WeightStore& store);
// One .h5 file of Keras weights (layer_names / weight_names, or a shard's layer_names), into
// store. libhdf5 reads it in a child process (a malformed file can crash libhdf5 or make it
// loop): past time_limit (default_h5_time_limit: 2 minutes + 30 s a GiB) the child is killed
// and the load fails, as it does when the child crashes.
void load_tf_h5_file(const std::string& path, WeightStore& store,
                     std::optional<std::chrono::seconds> time_limit = std::nullopt);
std::chrono::seconds default_h5_time_limit(const std::string& path);

// A TensorFlow SavedModel version directory: saved_model.pb and variables/variables.index.
bool is_saved_model_dir(const std::string& dir);
// What a SavedModel tells besides its variables: the 'serve' meta graph's signatures.
struct SavedModelSignature {
  std::string name;
  std::vector<std::string> inputs, outputs;  // the signature's input and output keys
};
// saved_model.pb's 'serve' meta graph's signatures (empty when it has none). Throws Error on a
// file that does not parse or has no 'serve' meta graph.
std::vector<SavedModelSignature> read_saved_model_signatures(const std::string& dir);
// The variables of dir/variables/ (TensorFlow's tensor bundle: a LevelDB-format table index read
// with Debian's libleveldb, data shards mapped): each variable under the PyTorch name of its
// full name (the bundle's object graph maps checkpoint keys to variable names; a checkpoint
// without one is keyed by the names themselves), kernels transposed. Float, half and bfloat16
// variables are taken; other entries (the save counter, optimizer slots) are skipped;
// partitioned variables are refused. Throws Error naming the file and the entry.
void load_saved_model_variables(const std::string& dir, WeightStore& store);

}  // namespace tf
