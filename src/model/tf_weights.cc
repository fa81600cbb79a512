#include "model/tf_weights.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <hdf5.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string_view>

#if defined(__SANITIZE_ADDRESS__)
#define TF_H5_CHILD_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TF_H5_CHILD_SANITIZED 1
#endif
#endif
#if defined(TF_H5_CHILD_SANITIZED)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#include "core/error.h"
#include "core/json.h"
#include "core/mapped_file.h"
#include "model/safetensors.h"

namespace tf {
namespace {

namespace fs = std::filesystem;

// One reading child at a time (libhdf5 itself only ever runs in the child).
std::mutex& h5_mutex() {
  static std::mutex mu;
  return mu;
}

// A libhdf5 handle, closed by its own close function.
class H5 {
 public:
  H5(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5() {
    if (id_ >= 0) close_(id_);
  }
  H5(const H5&) = delete;
  H5& operator=(const H5&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// A string attribute (one string or a list; fixed-length or variable-length), as Keras writes
// layer_names / weight_names. Empty when absent.
std::vector<std::string> string_attr(hid_t obj, const std::string& name, const std::string& where) {
  if (H5Aexists(obj, name.c_str()) <= 0) return {};
  const H5 attr(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!attr.ok()) fail("{}: attribute '{}' cannot be read", where, name);
  const H5 type(H5Aget_type(attr.get()), H5Tclose);
  const H5 space(H5Aget_space(attr.get()), H5Sclose);
  if (!type.ok() || !space.ok()) fail("{}: attribute '{}' cannot be read", where, name);
  if (H5Tget_class(type.get()) != H5T_STRING) return {};  // not a list of names
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0 || n > (1 << 24)) fail("{}: attribute '{}' has a bad size", where, name);
  std::vector<std::string> out;
  if (H5Tis_variable_str(type.get()) > 0) {
    const H5 mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    std::vector<char*> buf(static_cast<size_t>(n), nullptr);
    if (H5Aread(attr.get(), mem.get(), buf.data()) < 0)
      fail("{}: attribute '{}' cannot be read", where, name);
    for (char* s : buf) out.emplace_back(s ? s : "");
    H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, buf.data());
  } else {
    const size_t size = H5Tget_size(type.get());
    if (size == 0 || size > (1 << 16)) fail("{}: attribute '{}' has a bad size", where, name);
    const H5 mem(H5Tcopy(type.get()), H5Tclose);
    std::vector<char> buf(static_cast<size_t>(n) * size);
    if (H5Aread(attr.get(), mem.get(), buf.data()) < 0)
      fail("{}: attribute '{}' cannot be read", where, name);
    for (hssize_t i = 0; i < n; ++i) {
      std::string s(buf.data() + static_cast<size_t>(i) * size, size);
      s.erase(s.find_last_not_of('\0') + 1);  // null-padded
      s.erase(s.find_last_not_of(' ') + 1);   // or space-padded
      out.push_back(std::move(s));
    }
  }
  return out;
}

// Keras's list attribute, whole or in the chunks it splits a long one into (name0, name1, ...).
std::vector<std::string> name_list(hid_t obj, const std::string& name, const std::string& where) {
  if (H5Aexists(obj, name.c_str()) > 0) return string_attr(obj, name, where);
  std::vector<std::string> out;
  for (int chunk = 0;; ++chunk) {
    const std::string part = name + std::to_string(chunk);
    if (H5Aexists(obj, part.c_str()) <= 0) break;
    for (auto& s : string_attr(obj, part, where)) out.push_back(std::move(s));
  }
  return out;
}

// A weight as read: PyTorch's name and layout, f32 values.
struct Weight {
  std::string name;
  Shape shape;
  std::vector<float> values;
};

// One weight: its values as f32 (converted from the stored float type), PyTorch's layout and name.
Weight read_weight(hid_t parent, const std::string& path, const std::string& tf_name,
                   const std::string& where, int64_t file_bytes) {
  if (H5Lexists(parent, path.c_str(), H5P_DEFAULT) <= 0)
    fail("{}: weight '{}' is listed but not stored", where, tf_name);
  const H5 ds(H5Dopen2(parent, path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) fail("{}: weight '{}' is not a dataset", where, tf_name);
  const H5 type(H5Dget_type(ds.get()), H5Tclose);
  if (!type.ok() || H5Tget_class(type.get()) != H5T_FLOAT)
    fail("{}: weight '{}' is not stored as floating point", where, tf_name);
  const H5 space(H5Dget_space(ds.get()), H5Sclose);
  const int rank = space.ok() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  if (rank < 1 || rank > 4)
    fail("{}: weight '{}' has rank {} (1 to 4 are taken)", where, tf_name, rank);
  hsize_t dims[4] = {0, 0, 0, 0};
  H5Sget_simple_extent_dims(space.get(), dims, nullptr);
  Shape shape;
  shape.rank = rank;
  int64_t numel = 1;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] == 0 || dims[i] > (1ull << 32))
      fail("{}: weight '{}' has a bad dimension {}", where, tf_name, dims[i]);
    shape.dims[i] = static_cast<int64_t>(dims[i]);
    numel *= shape.dims[i];
    if (numel > (int64_t{1} << 36)) fail("{}: weight '{}' is too large", where, tf_name);
  }
  // The stored bytes bound what a header may claim (compression beyond 1024:1 is not weights).
  const int64_t stored = static_cast<int64_t>(H5Tget_size(type.get())) * numel;
  if (stored / 1024 > file_bytes)
    fail("{}: weight '{}' claims {} values, more than the file holds", where, tf_name, numel);
  std::vector<float> values(static_cast<size_t>(numel));
  if (H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    fail("{}: weight '{}' cannot be read", where, tf_name);

  const PtTensor pt = pt_tensor(tf_name, shape, where);
  if (pt.transpose) values = transposed(values, shape.dims[0], shape.dims[1]);
  return {pt.name, pt.shape, std::move(values)};
}

void silence_hdf5() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

}  // namespace

PtName tf_to_pt_name(const std::string& tf_name) {
  std::string s = tf_name;
  for (size_t p; (p = s.find(":0")) != std::string::npos;) s.erase(p, 2);
  static const std::regex triple(R"(/[^/]*___([^/]*)/)");
  s = std::regex_replace(s, triple, "/$1/");
  for (size_t p; (p = s.find("_._")) != std::string::npos;) s.replace(p, 3, "/");
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find('/', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) parts.push_back(s.substr(start, end - start));  // "//" collapses
    start = end + 1;
  }
  if (parts.size() > 1) parts.erase(parts.begin());  // the model's own name
  PtName out;
  if (parts.empty()) return out;
  std::string& last = parts.back();
  out.transpose = last == "kernel";
  if (last == "kernel" || last == "embeddings" || last == "gamma") last = "weight";
  if (last == "beta") last = "bias";
  for (size_t i = 0; i < parts.size(); ++i) out.name += (i ? "." : "") + parts[i];
  return out;
}

PtTensor pt_tensor(const std::string& tf_name, const Shape& stored, const std::string& where) {
  const PtName pt = tf_to_pt_name(tf_name);
  PtTensor out{pt.name, stored, pt.transpose};
  if (pt.transpose) {
    if (stored.rank != 2)
      fail("{}: '{}' is a kernel of rank {}: only 2-D (Dense) kernels are taken", where, tf_name,
           stored.rank);
    out.shape = Shape{stored.dims[1], stored.dims[0]};
  } else if (stored.rank == 2 && stored.dims[0] == 1 && pt.name.size() > 5 &&
             pt.name.compare(pt.name.size() - 5, 5, ".bias") == 0) {
    out.shape = Shape{stored.dims[1]};  // TFConv1D's [1, nf] bias is PyTorch's [nf]
  }
  return out;
}

std::vector<float> transposed(const std::vector<float>& values, int64_t rows, int64_t cols) {
  std::vector<float> t(values.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = values[r * cols + c];
  return t;
}

bool has_tf_h5(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / "tf_model.h5", ec) ||
         fs::exists(fs::path(dir) / "tf_model.h5.index.json", ec);
}

namespace {

// Every weight of one Keras .h5 file (in this process: the caller isolates it).
std::vector<Weight> read_h5(const std::string& path) {
  silence_hdf5();
  std::error_code ec;
  const int64_t file_bytes = static_cast<int64_t>(fs::file_size(path, ec));
  if (ec) fail(ErrorKind::kNotFound, "'{}' cannot be read: {}", path, ec.message());
  if (H5Fis_hdf5(path.c_str()) <= 0) fail("'{}' is not an HDF5 file (a tf_model.h5 is)", path);
  const H5 file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.ok()) fail("'{}' cannot be opened as HDF5", path);
  const std::vector<std::string> layers = name_list(file.get(), "layer_names", path);
  if (layers.empty())
    fail("'{}' has no layer_names: not Keras weights as TF save_pretrained writes them", path);
  std::vector<Weight> out;
  for (const std::string& layer : layers) {
    if (layer.empty()) fail("'{}': an empty layer name", path);
    H5O_info_t info;
    if (H5Lexists(file.get(), layer.c_str(), H5P_DEFAULT) <= 0 ||
        H5Oget_info_by_name2(file.get(), layer.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0)
      fail("'{}': layer '{}' is listed but not stored", path, layer);
    if (info.type == H5O_TYPE_DATASET) {
      // A shard of a sharded checkpoint: layer_names lists the datasets, named without the
      // model's own name.
      out.push_back(read_weight(file.get(), layer, "model/" + layer, path, file_bytes));
      continue;
    }
    const H5 group(H5Gopen2(file.get(), layer.c_str(), H5P_DEFAULT), H5Gclose);
    if (!group.ok()) fail("'{}': layer '{}' is not a group", path, layer);
    for (const std::string& w : name_list(group.get(), "weight_names", path))
      out.push_back(read_weight(group.get(), w, w, path, file_bytes));
  }
  if (out.empty()) fail("'{}' holds no weights", path);
  return out;
}

// Writes all of buf to fd (a pipe); best effort.
void write_all(int fd, const std::string& buf) {
  size_t done = 0;
  while (done < buf.size()) {
    const ssize_t n = ::write(fd, buf.data() + done, buf.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

std::chrono::seconds default_h5_time_limit(const std::string& path) {
  std::error_code ec;
  const auto bytes = fs::file_size(path, ec);
  return std::chrono::seconds(120 + (ec ? 0 : static_cast<int64_t>(bytes >> 30) * 30));
}

// The child's exit status when a sanitizer reported an error in our code (sanitizer builds
// only), and when it reported one in a library (libhdf5 reading past a malformed name: ASan's
// interceptors see the library's own bugs too).
constexpr int kChildSanitizerReport = 86;
constexpr int kChildLibraryMemoryError = 87;

#if defined(TF_H5_CHILD_SANITIZED)
// Whether the sanitizer's report in the child is about libhdf5's own code (its first two frames,
// the access and its caller, in libhdf5: ASan's interceptors and allocator see the library's
// bugs too) rather than ours. Set from ASan's report text; UBSan reports only come from our code.
bool g_report_in_library = false;

void classify_report(const char* report) {
  const std::string_view text(report);
  int frames = 0;
  for (size_t at = text.find("    #"); at != std::string_view::npos && frames < 2;
       at = text.find("    #", at + 1), ++frames) {
    const size_t end = text.find('\n', at);
    if (text.substr(at, end - at).find("libhdf5") != std::string_view::npos) {
      g_report_in_library = true;
      return;
    }
  }
}
#endif

void load_tf_h5_file(const std::string& path, WeightStore& store,
                     std::optional<std::chrono::seconds> time_limit) {
  // libhdf5 is not robust against malformed files (they can crash it or make it loop), so it
  // reads in a child process with a time limit; the child writes the weights as a safetensors
  // file, which this process then loads as any other.
  std::lock_guard lock(h5_mutex());
  static std::atomic<int> counter{0};
  const fs::path tmp = fs::temp_directory_path() /
                       fmt::format("tokenflow-h5-{}-{}.safetensors", ::getpid(), counter++);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) fail("'{}': pipe: {}", path, std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    fail("'{}': fork: {}", path, std::strerror(errno));
  }
  if (pid == 0) {  // the child: read, write, exit (no logging: the parent's locks are not ours)
    ::close(pipe_fds[0]);
#if defined(TF_H5_CHILD_SANITIZED)
    // A memory error in our reading code must fail a sanitizer build (the fuzz target, the
    // tests), not read as a malformed file: the child says so by its exit status, and the
    // parent aborts. libhdf5's own crashes (it is not instrumented) stay ordinary signals, as
    // in a release build, instead of going through the sanitizer's SEGV report.
    __asan_set_error_report_callback(classify_report);
    __sanitizer_set_death_callback(
        [] { ::_exit(g_report_in_library ? kChildLibraryMemoryError : kChildSanitizerReport); });
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGSEGV, &dfl, nullptr);
    ::sigaction(SIGBUS, &dfl, nullptr);
#endif
    int code = 0;
    try {
      const std::vector<Weight> weights = read_h5(path);
      std::vector<SafetensorsOutput> out;
      for (const Weight& w : weights)
        out.push_back({w.name, DType::kF32, w.shape, w.values.data()});
      write_safetensors(tmp.string(), out);
    } catch (const std::exception& e) {
      write_all(pipe_fds[1], e.what());
      code = 1;
    } catch (...) {
      code = 2;
    }
    ::_exit(code);
  }
  ::close(pipe_fds[1]);
  const auto limit = time_limit.value_or(default_h5_time_limit(path));
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::string message;
  bool timed_out = false;
  for (;;) {  // until the child closes the pipe (exits) or the deadline passes
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{pipe_fds[0], POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(pipe_fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the child is done
    if (message.size() < 4096) message.append(buf, static_cast<size_t>(n));
  }
  ::close(pipe_fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  struct Remove {  // the temporary file goes whatever happens (its mapping outlives it)
    fs::path p;
    ~Remove() {
      std::error_code ec;
      fs::remove(p, ec);
    }
  } remove{tmp};
  if (timed_out)
    fail(
        "'{}': reading it took longer than {} s; a malformed HDF5 file (or one too slow to "
        "read) is refused",
        path, limit.count());
  if (WIFSIGNALED(status))
    fail("'{}': libhdf5 crashed reading it (signal {}): a malformed HDF5 file", path,
         WTERMSIG(status));
#if defined(TF_H5_CHILD_SANITIZED)
  if (WIFEXITED(status) && WEXITSTATUS(status) == kChildSanitizerReport) {
    std::fprintf(stderr,
                 "tokenflow: a sanitizer reported an error in the HDF5 reader's child "
                 "process (its report is above, or in the sanitizer's log_path)\n");
    std::abort();
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == kChildLibraryMemoryError)
    fail("'{}': libhdf5 made a memory error reading it: a malformed HDF5 file", path);
#endif
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail("{}", message.empty() ? fmt::format("'{}' could not be read", path) : message);
  load_safetensors_file(tmp.string(), store);
}

void load_tf_h5_dir(const std::string& dir, WeightStore& store) {
  const fs::path single = fs::path(dir) / "tf_model.h5";
  const fs::path index = fs::path(dir) / "tf_model.h5.index.json";
  std::error_code ec;
  if (fs::exists(single, ec)) return load_tf_h5_file(single.string(), store);
  const nlohmann::json j = parse_json(read_file(index.string()), index.string());
  const auto wm = j.is_object() ? j.find("weight_map") : j.end();
  if (wm == j.end() || !wm->is_object() || wm->empty())
    fail("'{}': missing or empty weight_map", index.string());
  std::set<std::string> shards;
  for (const auto& [name, file] : wm->items()) {
    if (!file.is_string())
      fail("'{}': weight_map entry '{}' is not a file name", index.string(), name);
    const std::string shard = file.get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
      fail("'{}': shard name '{}' must be a plain file name", index.string(), shard);
    shards.insert(shard);
  }
  for (const std::string& shard : shards) load_tf_h5_file((fs::path(dir) / shard).string(), store);
}

}  // namespace tf
