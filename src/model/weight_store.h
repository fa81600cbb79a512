#pragma once
// Named tensors of a model and the memory behind them: mapped files, plus f32 copies made once at
// load where a tensor is stored in another dtype, misaligned, or transposed.

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/tensor.h"
#include "kernels/weights.h"

namespace tf {

class WeightStore {
 public:
  // Takes ownership of a mapped file whose bytes tensors will point into; returns its index.
  int add_file(MappedFile file);
  const MappedFile& file(int index) const { return files_.at(index); }
  // Registers a tensor; throws on a duplicate name.
  void add(const std::string& name, const TensorView& view, int file_index);
  // Registers a tensor stored in one of ggml's block formats (a GGUF tensor): `shape` is its
  // logical shape, `bytes` its blocks in the file. matrix() reads it in place (a copy owned by
  // the store, as for every tensor) unless a compute type is set; f32() dequantizes it.
  void add_blocks(const std::string& name, const Shape& shape, kernels::WeightType type,
                  const void* bytes, int file_index);
  // Registers a tensor whose f32 values the store keeps (converted at load from a format no
  // kernel reads, e.g. a GGUF block format); file_index names the file it came from.
  void add_f32(const std::string& name, const Shape& shape, std::vector<float> values,
               int file_index);
  // Registers blocks of a ggml format the store keeps (laid out at load from another layout:
  // gpt-oss's MXFP4 as OpenAI stores it): returns the store's buffer for them (64-byte aligned,
  // every row's blocks), which the caller fills before matrix() reads it in place.
  uint8_t* add_owned_blocks(const std::string& name, const Shape& shape, kernels::WeightType type,
                            int file_index);
  // The file a tensor came from (for tensors derived from it).
  int file_index_of(const std::string& name) const { return entry(name).file_index; }

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws kNotFound naming the tensor and the files searched.
  const TensorView& get(const std::string& name) const;
  // The tensor as f32 with exactly `shape` (same element count is not enough: the dims must
  // match). Converts once and keeps the copy; returns mapped bytes directly when they are
  // already aligned f32.
  const float* f32(const std::string& name, const Shape& shape);
  // A 2-D tensor stored [rows, cols] returned as f32 [cols, rows].
  const float* f32_transposed(const std::string& name, const Shape& stored_shape);

  // The dtype matrix() packs weights into (--dtype); f32 unless set before the model is built.
  void set_compute_type(kernels::WeightType t) { compute_type_ = t; }
  kernels::WeightType compute_type() const { return compute_type_; }
  // With the compute type f32 (the default), keep every matrix in the type its file stores
  // (GGUF: block formats, f16 and bf16 used as they are) instead of widening it to f32.
  void set_keep_stored_types(bool keep) { keep_stored_types_ = keep; }
  // A linear layer's weight [n, k] in the compute type (transposed: stored [k, n], as GPT-2's
  // Conv1D). Packed once and kept; bf16/f16 tensors already in that type are used in place, and
  // no f32 copy is kept of a tensor packed into a narrower type. With q4, a matrix whose rows
  // are not a multiple of 32 is packed as int8.
  // A matrix stored packed by `tokenflow quantize` (NAME + ".tf_scale" for int8, ".tf_scales"
  // for q4, rows [out, in]) is used as stored, whatever the compute type.
  // q4, Q4_0, Q8_0, int8, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS matrices are laid out in panels of 16
  // rows (weights.h) where the kernel table has panel kernels (and TOKENFLOW_PANELS is not 0); a
  // matrix the model views in row ranges (WeightMatrix::rows) says so by row_unit, the rows those
  // ranges start at being multiples of it: panels then only if row_unit is a multiple of 16. 0: not
  // viewed in parts. f32, f16 and bf16 matrices go in float panels where use_float_panels says so,
  // n and row_unit (if set) being multiples of 16 (so a matrix gets the same layout, and its rows
  // the same bits, stored alone, fused or stacked).
  kernels::WeightMatrix matrix(const std::string& name, int64_t n, int64_t k,
                               bool transposed = false, int64_t row_unit = 0);
  // A 3-D tensor [count, n, k] (experts stored stacked: GGUF's ffn_*_exps, transformers v5's
  // mlp.experts.*_proj) as `count` matrices [n, k]: packed once as one [count * n, k] matrix,
  // each a view of its rows (row_unit: as matrix(), for views within each matrix).
  std::vector<kernels::WeightMatrix> matrix_stack(const std::string& name, int64_t count, int64_t n,
                                                  int64_t k, int64_t row_unit = 0);
  // What matrix() made of a tensor, or nullptr if it was not asked for.
  const kernels::WeightMatrix* packed_matrix(const std::string& name) const {
    auto it = packed_.find(name);
    return it == packed_.end() ? nullptr : &it->second;
  }

  // After packing: drops the mapped files' pages from the resident set (what is still used, the
  // f32 norms and biases, comes back from the file when touched).
  // Unmaps the files once the model is built: every tensor it uses was copied or converted.
  void close_files();

  // Every tensor named from + REST renamed to + REST (a wrapper's text model read under the
  // text model's names); throws on a name already taken.
  void rename_prefix(const std::string& from, const std::string& to);

  std::vector<std::string> names() const;
  size_t size() const { return tensors_.size(); }
  // Bytes of all tensors as stored, and bytes of the f32 copies made so far.
  size_t stored_bytes() const;
  // The storage type holding most of the parameters, as GGUF and Ollama name it ("Q8_0",
  // "Q4_K", "F16", "BF16", "F32"): what a model listing shows as its quantization.
  std::string stored_type() const;
  size_t converted_bytes() const { return converted_bytes_; }
  std::string sources() const;  // the file names, for messages

 private:
  struct Entry {
    TensorView view;  // as stored
    int file_index;
    const float* converted;  // the f32 copy, once made
    bool owned;              // view points at the store's memory, not into the file
    // A ggml block format: view is then the raw bytes (U8 [rows, row bytes]), shape the
    // logical shape.
    kernels::WeightType blocks = kernels::WeightType::kF32;
    Shape shape;
  };
  const Entry& entry(const std::string& name) const;
  // A copy of a tensor's stored bytes, aligned, owned by the store.
  const void* own_copy(const Entry& e, size_t align);
  // n uninitialized bytes owned by the store (2 MiB pages when large), aligned to align.
  uint8_t* alloc_bytes(size_t n, size_t align);
  void check_shape(const std::string& name, const Entry& e, const Shape& shape) const;
  float* alloc(size_t n);
  // f32 weights as f32-panels (kernels::use_float_panels), cached as the packed types are.
  kernels::WeightMatrix f32_panels(const std::string& name, int64_t n, int64_t k, bool transposed);
  kernels::WeightMatrix prepacked(const std::string& name, int64_t n, int64_t k, bool panels);
  // q4 or int8 rows, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K or IQ4 blocks laid out in panels in buffers of
  // this store.
  kernels::WeightMatrix to_panels(kernels::WeightType t, const void* data, const void* scales,
                                  int64_t n, int64_t k);
  // The entry of a tensor that must have this dtype and shape (a clear error otherwise).
  const Entry& checked(const std::string& name, DType dtype, const Shape& shape) const;
  // Drops a mapped tensor's pages once what it held was copied or converted.
  void release_source(const Entry& e);
  // The bytes of a tensor with the given dtype and shape, aligned to `align` (copied if not).
  const void* aligned_bytes(const std::string& name, DType dtype, const Shape& shape, size_t align);

  std::vector<MappedFile> files_;
  std::map<std::string, Entry> tensors_;
  std::deque<std::vector<float>> owned_;
  std::deque<std::vector<uint8_t>> owned_bytes_;
  // Copies of stored tensors: not zero-filled first, and in transparent huge pages when large
  // (a 1 GB model's copy was half memset and page faults otherwise).
  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };
  std::deque<std::unique_ptr<uint8_t, FreeDeleter>> copies_;
  std::map<std::string, kernels::WeightMatrix> packed_;
  kernels::WeightType compute_type_ = kernels::WeightType::kF32;
  bool keep_stored_types_ = false;
  size_t converted_bytes_ = 0;
};

}  // namespace tf
