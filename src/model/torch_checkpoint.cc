#include "model/torch_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <limits>
#include <optional>
#include <string_view>

#include "core/dtype.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "model/safetensors.h"
#include "model/weight_store.h"

namespace tf {
namespace {

// ---------------------------------------------------------------- zip (PKWARE APPNOTE 6.3)

uint16_t u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}
uint32_t u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}
uint64_t u64(const uint8_t* p) {
  return u32(p) | static_cast<uint64_t>(u32(p + 4)) << 32;
}

struct ZipEntry {
  uint64_t offset = 0;  // of the entry's data in the file
  uint64_t size = 0;
};

constexpr uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50, kEnd = 0x06054b50,
                   kEnd64 = 0x06064b50, kEnd64Locator = 0x07064b50;

// The stored entries of a zip archive by name. Every offset and size is checked against the file;
// compressed entries are refused (torch.save stores them).
std::map<std::string, ZipEntry> read_zip(const uint8_t* data, size_t size,
                                         const std::string& path) {
  // The end-of-central-directory record: 22 bytes and a comment of at most 65535 bytes.
  if (size < 22) fail("'{}': too short for a zip archive", path);
  std::optional<size_t> end;
  for (size_t at = size - 22, stop = size >= 22 + 65535 ? size - 22 - 65535 : 0;; --at) {
    if (u32(data + at) == kEnd && at + 22 + u16(data + at + 20) == size) {
      end = at;
      break;
    }
    if (at == stop) break;
  }
  if (!end) fail("'{}': no zip end-of-central-directory record", path);
  const uint8_t* e = data + *end;
  uint64_t count = u16(e + 10), dir_size = u32(e + 12), dir_offset = u32(e + 16);
  if (count == 0xffff || dir_size == 0xffffffffu || dir_offset == 0xffffffffu) {
    // Zip64 (files past 4 GiB, which torch.save writes for big shards): a locator right before.
    if (*end < 20 || u32(e - 20) != kEnd64Locator)
      fail("'{}': zip64 sizes without a zip64 locator", path);
    const uint64_t at = u64(e - 20 + 8);
    if (at > size || size - at < 56 || u32(data + at) != kEnd64)
      fail("'{}': zip64 end-of-central-directory record out of place", path);
    count = u64(data + at + 32);
    dir_size = u64(data + at + 40);
    dir_offset = u64(data + at + 48);
  }
  if (dir_offset > size || dir_size > size - dir_offset)
    fail("'{}': the zip central directory lies outside the file", path);
  if (count > dir_size / 46)
    fail("'{}': {} zip entries cannot fit the central directory", path, count);
  std::map<std::string, ZipEntry> entries;
  const uint8_t* p = data + dir_offset;
  const uint8_t* dir_end = p + dir_size;
  for (uint64_t i = 0; i < count; ++i) {
    if (dir_end - p < 46 || u32(p) != kCentralHeader)
      fail("'{}': zip central directory entry {} is malformed", path, i);
    const uint16_t method = u16(p + 10), name_len = u16(p + 28), extra_len = u16(p + 30),
                   comment_len = u16(p + 32);
    uint64_t comp = u32(p + 20), raw = u32(p + 24), local = u32(p + 42);
    if (static_cast<uint64_t>(dir_end - p) < 46ull + name_len + extra_len + comment_len)
      fail("'{}': zip central directory entry {} runs past the directory", path, i);
    std::string name(reinterpret_cast<const char*>(p + 46), name_len);
    // Zip64 extended information: 8-byte values for the fields saturated above, in order.
    const uint8_t* x = p + 46 + name_len;
    for (const uint8_t* xe = x + extra_len; xe - x >= 4;) {
      const uint16_t id = u16(x), len = u16(x + 2);
      if (xe - x - 4 < len) fail("'{}': zip entry '{}' has a malformed extra field", path, name);
      if (id == 0x0001) {
        const uint8_t* v = x + 4;
        int left = len / 8;
        for (uint64_t* field : {&raw, &comp, &local}) {
          if (*field != 0xffffffffu) continue;
          if (left-- <= 0) fail("'{}': zip entry '{}' lacks its zip64 sizes", path, name);
          *field = u64(v);
          v += 8;
        }
      }
      x += 4 + len;
    }
    p += 46 + name_len + extra_len + comment_len;
    if (method != 0)
      fail(ErrorKind::kUnsupported,
           "'{}': zip entry '{}' is compressed (method {}); PyTorch checkpoints store their "
           "entries, re-save it with torch.save",
           path, name, method);
    if (comp != raw) fail("'{}': zip entry '{}' is stored with two sizes", path, name);
    if (local > size || size - local < 30 || u32(data + local) != kLocalHeader)
      fail("'{}': zip entry '{}' has no local header where the directory says", path, name);
    const uint64_t start = local + 30 + u16(data + local + 26) + u16(data + local + 28);
    if (start > size || raw > size - start)
      fail("'{}': zip entry '{}' ({} bytes) runs past the end of the file", path, name, raw);
    if (!entries.emplace(name, ZipEntry{start, raw}).second)
      fail("'{}': zip entry '{}' appears twice", path, name);
  }
  return entries;
}

// ---------------------------------------------------------------- the restricted unpickler

// One Python object of the pickle. Objects live in the unpickler's arena and refer to each other
// by pointer, so shared and even cyclic references (which a pickle can build through its memo)
// cost nothing to free and no traversal recurses through them.
struct PyObj {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kStr,
    kBytes,
    kTuple,
    kList,
    kDict,  // items: key, value, key, value, ...
    kGlobal,
    kStorage,
    kTensor,
  } kind = Kind::kNone;
  int64_t i = 0;
  double f = 0;
  std::string s;  // str, bytes, a global's "module.name", a storage's key
  std::vector<PyObj*> items;
  DType dtype = DType::kF32;  // a storage class's or a storage's
  TorchTensor tensor;
};
using Kind = PyObj::Kind;

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kStr:
      return "str";
    case Kind::kBytes:
      return "bytes";
    case Kind::kTuple:
      return "tuple";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kGlobal:
      return "global";
    case Kind::kStorage:
      return "storage";
    case Kind::kTensor:
      return "tensor";
  }
  return "object";
}

// The storage classes torch.save names in persistent ids, and their element types.
std::optional<DType> storage_dtype(std::string_view global) {
  static const std::pair<std::string_view, DType> kStorages[] = {
      {"torch.FloatStorage", DType::kF32},     {"torch.HalfStorage", DType::kF16},
      {"torch.BFloat16Storage", DType::kBF16}, {"torch.DoubleStorage", DType::kF64},
      {"torch.LongStorage", DType::kI64},      {"torch.IntStorage", DType::kI32},
      {"torch.ShortStorage", DType::kI16},     {"torch.CharStorage", DType::kI8},
      {"torch.ByteStorage", DType::kU8},       {"torch.BoolStorage", DType::kBool},
  };
  for (const auto& [name, t] : kStorages)
    if (global == name) return t;
  return std::nullopt;
}

constexpr std::string_view kCallables[] = {
    "collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor",
    "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state"};

class Unpickler {
 public:
  Unpickler(const uint8_t* data, size_t size, std::string path)
      : p_(data), end_(data + size), path_(std::move(path)) {}

  PyObj* run() {
    while (true) {
      const uint8_t op = byte();
      switch (op) {
        case 0x80:  // PROTO
          if (byte() > 5) bad("pickle protocol above 5");
          break;
        case 0x95:  // FRAME: a length to skip (the frame's bytes follow in line)
          take(8);
          break;
        case '}':
          push(make(Kind::kDict));
          break;
        case ']':
          push(make(Kind::kList));
          break;
        case ')':
          push(make(Kind::kTuple));
          break;
        case '(':
          marks_.push_back(stack_.size());
          break;
        case 't':
          push(container(Kind::kTuple, pop_mark()));
          break;
        case 'l':
          push(container(Kind::kList, pop_mark()));
          break;
        case 'd': {
          std::vector<PyObj*> kv = pop_mark();
          if (kv.size() % 2 != 0) bad("DICT with an odd number of items");
          push(container(Kind::kDict, std::move(kv)));
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          const size_t n = static_cast<size_t>(op - 0x84);
          need(n);
          std::vector<PyObj*> v(stack_.end() - static_cast<ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          push(container(Kind::kTuple, std::move(v)));
          break;
        }
        case 'a': {  // APPEND
          PyObj* v = pop();
          add_items(top(), Kind::kList, {v});
          break;
        }
        case 'e': {  // APPENDS
          std::vector<PyObj*> v = pop_mark();
          add_items(top(), Kind::kList, std::move(v));
          break;
        }
        case 's': {  // SETITEM
          PyObj* v = pop();
          PyObj* k = pop();
          add_items(top(), Kind::kDict, {k, v});
          break;
        }
        case 'u': {  // SETITEMS
          std::vector<PyObj*> kv = pop_mark();
          if (kv.size() % 2 != 0) bad("SETITEMS with an odd number of items");
          add_items(top(), Kind::kDict, std::move(kv));
          break;
        }
        case 'q':  // BINPUT
          memo_put(byte());
          break;
        case 'r':  // LONG_BINPUT
          memo_put(u32(take(4)));
          break;
        case 0x94:  // MEMOIZE
          memo_put(memo_.size());
          break;
        case 'h':  // BINGET
          push(memo_get(byte()));
          break;
        case 'j':  // LONG_BINGET
          push(memo_get(u32(take(4))));
          break;
        case 'X':  // BINUNICODE
          push(string(Kind::kStr, u32(take(4))));
          break;
        case 0x8c:  // SHORT_BINUNICODE
          push(string(Kind::kStr, byte()));
          break;
        case 0x8d:  // BINUNICODE8
          push(string(Kind::kStr, u64(take(8))));
          break;
        case 'U':  // SHORT_BINSTRING
          push(string(Kind::kStr, byte()));
          break;
        case 'T':  // BINSTRING
          push(string(Kind::kStr, u32(take(4))));
          break;
        case 'C':  // SHORT_BINBYTES
          push(string(Kind::kBytes, byte()));
          break;
        case 'B':  // BINBYTES
          push(string(Kind::kBytes, u32(take(4))));
          break;
        case 'J':  // BININT
          push(integer(static_cast<int32_t>(u32(take(4)))));
          break;
        case 'K':  // BININT1
          push(integer(byte()));
          break;
        case 'M':  // BININT2
          push(integer(u16(take(2))));
          break;
        case 0x8a: {  // LONG1: n little-endian two's-complement bytes
          const size_t n = byte();
          if (n > 8) bad("an integer wider than 64 bits");
          const uint8_t* b = take(n);
          uint64_t v = 0;
          for (size_t k = 0; k < n; ++k) v |= static_cast<uint64_t>(b[k]) << (8 * k);
          if (n > 0 && n < 8 && (b[n - 1] & 0x80)) v |= ~uint64_t{0} << (8 * n);
          push(integer(static_cast<int64_t>(v)));
          break;
        }
        case 'G': {  // BINFLOAT: big-endian double
          const uint8_t* b = take(8);
          uint64_t bits = 0;
          for (int k = 0; k < 8; ++k) bits = bits << 8 | b[k];
          PyObj* o = make(Kind::kFloat);
          std::memcpy(&o->f, &bits, sizeof bits);
          push(o);
          break;
        }
        case 'N':
          push(make(Kind::kNone));
          break;
        case 0x88:
        case 0x89: {  // NEWTRUE, NEWFALSE
          PyObj* o = make(Kind::kBool);
          o->i = op == 0x88;
          push(o);
          break;
        }
        case 'c': {  // GLOBAL module\nname\n
          std::string module = line(), name = line();
          push(global(module + "." + name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          PyObj* name = pop();
          PyObj* module = pop();
          if (module->kind != Kind::kStr || name->kind != Kind::kStr)
            bad("STACK_GLOBAL of a non-string");
          push(global(module->s + "." + name->s));
          break;
        }
        case 'R': {  // REDUCE
          PyObj* args = pop();
          PyObj* fn = pop();
          push(call(fn, args));
          break;
        }
        case 0x81: {  // NEWOBJ
          PyObj* args = pop();
          PyObj* cls = pop();
          push(call(cls, args));
          break;
        }
        case 'b': {  // BUILD: an object's state; a state dict's _metadata, ignored
          pop();
          const Kind k = top()->kind;
          if (k != Kind::kDict && k != Kind::kTensor)
            bad(fmt::format("BUILD on a {}", kind_name(k)));
          break;
        }
        case 'Q':  // BINPERSID
          push(storage(pop()));
          break;
        case '0':  // POP
          pop();
          break;
        case '1':  // POP_MARK
          pop_mark();
          break;
        case '2':  // DUP
          push(top());
          break;
        case '.':  // STOP
          if (stack_.size() != 1 || !marks_.empty())
            bad("STOP with a stack of more than one object");
          return stack_.back();
        default:
          fail(ErrorKind::kUnsupported,
               "'{}': data.pkl uses pickle opcode 0x{:02x} at byte {}, which a state dict does "
               "not; refused",
               path_, op, consumed() - 1);
      }
    }
  }

  std::map<std::string, TorchStorage>& storages() { return storages_; }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    fail("'{}': data.pkl is not a valid state dict pickle: {} (at byte {})", path_, what,
         consumed());
  }
  size_t consumed() const { return static_cast<size_t>(p_ - begin_); }
  uint8_t byte() { return *take(1); }
  const uint8_t* take(uint64_t n) {
    if (static_cast<uint64_t>(end_ - p_) < n) bad("it ends early");
    const uint8_t* at = p_;
    p_ += n;
    return at;
  }
  std::string line() {
    const uint8_t* nl = static_cast<const uint8_t*>(std::memchr(p_, '\n', end_ - p_));
    if (nl == nullptr) bad("a GLOBAL without its newline");
    std::string s(reinterpret_cast<const char*>(p_), nl - p_);
    p_ = nl + 1;
    return s;
  }
  PyObj* make(Kind k) {
    // At most one object per opcode byte, so the arena is bounded by the input.
    arena_.emplace_back();
    arena_.back().kind = k;
    return &arena_.back();
  }
  PyObj* integer(int64_t v) {
    PyObj* o = make(Kind::kInt);
    o->i = v;
    return o;
  }
  PyObj* string(Kind k, uint64_t n) {
    PyObj* o = make(k);
    const uint8_t* b = take(n);
    o->s.assign(reinterpret_cast<const char*>(b), n);
    return o;
  }
  PyObj* container(Kind k, std::vector<PyObj*> items) {
    PyObj* o = make(k);
    o->items = std::move(items);
    return o;
  }
  void add_items(PyObj* to, Kind want, std::vector<PyObj*> v) {
    if (to->kind != want) bad(fmt::format("adding items to a {}", kind_name(to->kind)));
    to->items.insert(to->items.end(), v.begin(), v.end());
  }
  void push(PyObj* o) { stack_.push_back(o); }
  void need(size_t n) {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + n) bad("the stack runs empty");
  }
  PyObj* pop() {
    need(1);
    PyObj* o = stack_.back();
    stack_.pop_back();
    return o;
  }
  PyObj* top() {
    need(1);
    return stack_.back();
  }
  std::vector<PyObj*> pop_mark() {
    if (marks_.empty()) bad("no MARK to pop to");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<PyObj*> v(stack_.begin() + static_cast<ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return v;
  }
  void memo_put(uint64_t key) {
    if (key > memo_.size() + (uint64_t{1} << 20)) bad("a memo index far past the others");
    memo_[key] = top();
  }
  PyObj* memo_get(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) bad(fmt::format("memo entry {} was never stored", key));
    return it->second;
  }
  PyObj* global(const std::string& name) {
    const bool callable =
        std::find(std::begin(kCallables), std::end(kCallables), name) != std::end(kCallables);
    if (!callable && !storage_dtype(name))
      fail(ErrorKind::kUnsupported,
           "'{}': data.pkl asks for the Python global '{}', which a state dict of tensors does "
           "not use; refused (tokenflow never runs code from a checkpoint: save the state dict "
           "alone, or convert it to safetensors)",
           path_, name);
    PyObj* o = make(Kind::kGlobal);
    o->s = name;
    return o;
  }
  int64_t int_of(PyObj* o, const char* what) {
    if (o->kind != Kind::kInt) bad(fmt::format("{} is a {}, not an int", what, kind_name(o->kind)));
    return o->i;
  }
  // A persistent id: ('storage', storage class, key, location, numel).
  PyObj* storage(PyObj* pid) {
    if (pid->kind != Kind::kTuple || pid->items.size() != 5 || pid->items[0]->kind != Kind::kStr ||
        pid->items[0]->s != "storage")
      bad("a persistent id that is not ('storage', type, key, location, size)");
    PyObj* type = pid->items[1];
    if (type->kind != Kind::kGlobal || !storage_dtype(type->s))
      bad("a storage of no known storage class");
    PyObj* key = pid->items[2];
    if (key->kind != Kind::kStr || key->s.empty() || key->s.size() > 64 ||
        key->s.find_first_of("/\\") != std::string::npos)
      bad("a storage key that is not a plain name");
    const int64_t numel = int_of(pid->items[4], "a storage's size");
    if (numel < 0) bad("a storage of negative size");
    const DType t = *storage_dtype(type->s);
    auto [it, fresh] = storages_.try_emplace(key->s, TorchStorage{t, numel, 0, 0});
    if (!fresh && (it->second.dtype != t || it->second.numel != numel))
      bad(fmt::format("storage '{}' named with two types or sizes", key->s));
    PyObj* o = make(Kind::kStorage);
    o->s = key->s;
    o->dtype = t;
    return o;
  }
  std::vector<int64_t> ints(PyObj* o, const char* what) {
    if (o->kind != Kind::kTuple && o->kind != Kind::kList)
      bad(fmt::format("{} is a {}, not a tuple", what, kind_name(o->kind)));
    std::vector<int64_t> v;
    for (PyObj* e : o->items) v.push_back(int_of(e, what));
    return v;
  }
  PyObj* call(PyObj* fn, PyObj* args) {
    if (fn->kind != Kind::kGlobal) bad(fmt::format("calling a {}", kind_name(fn->kind)));
    if (args->kind != Kind::kTuple) bad("call arguments that are not a tuple");
    const std::vector<PyObj*>& a = args->items;
    const std::string& f = fn->s;
    if (f == "collections.OrderedDict") {
      if (!a.empty()) bad("OrderedDict built from arguments");
      return make(Kind::kDict);
    }
    if (f == "torch._utils._rebuild_parameter" ||
        f == "torch._utils._rebuild_parameter_with_state") {
      if (a.empty() || a[0]->kind != Kind::kTensor) bad("a parameter of no tensor");
      return a[0];
    }
    if (f == "torch._utils._rebuild_tensor_v2" || f == "torch._utils._rebuild_tensor") {
      // (storage, storage_offset, size, stride[, requires_grad, backward_hooks[, metadata]])
      if (a.size() < 4 || a.size() > 7 || a[0]->kind != Kind::kStorage)
        bad(fmt::format("{} with arguments it does not take", f));
      const std::vector<int64_t> shape = ints(a[2], "a tensor's size");
      const std::vector<int64_t> stride = ints(a[3], "a tensor's stride");
      if (shape.size() != stride.size()) bad("a tensor whose size and stride differ in rank");
      PyObj* o = make(Kind::kTensor);
      TorchTensor& t = o->tensor;
      t.storage = a[0]->s;
      o->dtype = a[0]->dtype;
      t.offset = int_of(a[1], "a tensor's storage offset");
      if (t.offset < 0) bad("a negative storage offset");
      if (shape.size() > static_cast<size_t>(kMaxRank)) {
        t.shape.rank = -1;  // skipped: more dimensions than tokenflow's tensors hold
        return o;
      }
      t.shape.rank = static_cast<int>(shape.size());
      for (size_t d = 0; d < shape.size(); ++d) {
        if (shape[d] < 0 || stride[d] < 0) bad("a negative size or stride");
        t.shape.dims[d] = shape[d];
        t.strides[d] = stride[d];
      }
      return o;
    }
    fail(ErrorKind::kUnsupported, "'{}': data.pkl calls '{}'; refused", path_, f);
  }

  const uint8_t* p_;
  const uint8_t* const end_;
  const uint8_t* const begin_ = p_;
  std::string path_;
  std::deque<PyObj> arena_;
  std::vector<PyObj*> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, PyObj*> memo_;
  std::map<std::string, TorchStorage> storages_;
};

// The highest element index a tensor reads plus one, or nullopt on overflow; 0 if it is empty.
std::optional<uint64_t> extent(const TorchTensor& t) {
  uint64_t last = static_cast<uint64_t>(t.offset);
  for (int d = 0; d < t.shape.rank; ++d) {
    if (t.shape.dims[d] == 0) return 0;
    const uint64_t span = static_cast<uint64_t>(t.shape.dims[d] - 1);
    const uint64_t stride = static_cast<uint64_t>(t.strides[d]);
    if (stride != 0 && span > (std::numeric_limits<uint64_t>::max() / 4 - last) / stride)
      return std::nullopt;
    last += span * stride;
  }
  return last + 1;
}

}  // namespace

bool TorchTensor::contiguous() const {
  int64_t expect = 1;
  for (int d = shape.rank - 1; d >= 0; --d) {
    if (shape.dims[d] != 1 && strides[d] != expect) return false;
    expect *= shape.dims[d];
  }
  return true;
}

bool is_torch_zip(const uint8_t* data, size_t size) {
  return size >= 4 && u32(data) == kLocalHeader;
}

TorchCheckpoint parse_torch_checkpoint(const uint8_t* data, size_t size, const std::string& path) {
  if (!is_torch_zip(data, size)) {
    // torch.save before 1.6 wrote pickles back to back (a magic number first), older ones tar.
    if (size >= 2 && data[0] == 0x80 && data[1] <= 5)
      fail(ErrorKind::kUnsupported,
           "'{}' is a PyTorch checkpoint in the legacy (pre-1.6) format, which tokenflow does "
           "not read: re-save it with torch >= 1.6 (torch.save(torch.load(f), f)) or convert it "
           "to safetensors",
           path);
    fail("'{}' is not a PyTorch checkpoint (not a zip archive)", path);
  }
  const std::map<std::string, ZipEntry> zip = read_zip(data, size, path);
  // ARCHIVE/data.pkl, whatever the archive's name (torch.save uses the file's stem or "archive").
  std::string prefix;
  const ZipEntry* pkl = nullptr;
  for (const auto& [name, e] : zip) {
    const size_t slash = name.find('/');
    if (slash == std::string::npos || name.compare(slash, std::string::npos, "/data.pkl") != 0)
      continue;
    if (pkl != nullptr) fail("'{}': more than one data.pkl in the archive", path);
    prefix = name.substr(0, slash + 1);
    pkl = &e;
  }
  if (pkl == nullptr)
    fail("'{}': a zip archive without ARCHIVE/data.pkl is not a PyTorch checkpoint", path);
  if (auto it = zip.find(prefix + "byteorder"); it != zip.end()) {
    const std::string order(reinterpret_cast<const char*>(data + it->second.offset),
                            it->second.size);
    if (order != "little")
      fail(ErrorKind::kUnsupported, "'{}': a {}-endian checkpoint is not supported", path, order);
  }
  Unpickler u(data + pkl->offset, pkl->size, path);
  PyObj* root = u.run();
  // A training checkpoint wraps the state dict: {"state_dict": {...}, "epoch": ...}.
  const auto lookup = [](PyObj* dict, std::string_view key) -> PyObj* {
    for (size_t i = 0; i + 1 < dict->items.size(); i += 2)
      if (dict->items[i]->kind == Kind::kStr && dict->items[i]->s == key) return dict->items[i + 1];
    return nullptr;
  };
  if (root->kind != Kind::kDict)
    fail(ErrorKind::kUnsupported, "'{}': the checkpoint holds a {}, not a state dict", path,
         kind_name(root->kind));
  for (const char* key : {"state_dict", "model", "module"}) {
    PyObj* inner = lookup(root, key);
    if (inner != nullptr && inner->kind == Kind::kDict) {
      root = inner;
      break;
    }
  }
  TorchCheckpoint ck;
  ck.storages = std::move(u.storages());
  for (auto& [key, s] : ck.storages) {
    auto it = zip.find(prefix + "data/" + key);
    if (it == zip.end())
      fail("'{}': storage '{}' has no entry data/{} in the archive", path, key, key);
    s.offset = it->second.offset;
    s.bytes = it->second.size;
    if (static_cast<uint64_t>(s.numel) > s.bytes / dtype_size(s.dtype))
      fail("'{}': storage '{}' holds {} bytes, fewer than its {} elements of {}", path, key,
           s.bytes, s.numel, dtype_name(s.dtype));
  }
  std::map<std::string, bool> seen;
  for (size_t i = 0; i + 1 < root->items.size(); i += 2) {
    PyObj* k = root->items[i];
    PyObj* v = root->items[i + 1];
    if (k->kind != Kind::kStr || v->kind != Kind::kTensor) continue;  // e.g. "epoch": 3
    if (!seen.emplace(k->s, true).second) fail("'{}': tensor '{}' appears twice", path, k->s);
    TorchTensor t = v->tensor;
    t.name = k->s;
    if (t.shape.rank < 0) {
      ck.skipped.push_back(t.name);
      continue;
    }
    const TorchStorage& s = ck.storages.at(t.storage);
    const std::optional<uint64_t> n = extent(t);
    if (!n || *n > static_cast<uint64_t>(s.numel))
      fail("'{}': tensor '{}' {} reads past the {} elements of its storage '{}'", path, t.name,
           t.shape.to_string(), s.numel, t.storage);
    ck.tensors.push_back(std::move(t));
  }
  return ck;
}

void load_torch_file(const std::string& path, WeightStore& store) {
  MappedFile file = MappedFile::open(path);
  const TorchCheckpoint ck = parse_torch_checkpoint(file.data(), file.size(), path);
  const uint8_t* base = file.data();
  const int index = store.add_file(std::move(file));
  for (const TorchTensor& t : ck.tensors) {
    const TorchStorage& s = ck.storages.at(t.storage);
    const bool floating = s.dtype == DType::kF32 || s.dtype == DType::kF16 ||
                          s.dtype == DType::kBF16 || s.dtype == DType::kF64;
    if (!floating) continue;  // integer and bool buffers (position ids, masks)
    const uint8_t* bytes = base + s.offset;
    const size_t esize = dtype_size(s.dtype);
    if (t.contiguous() && s.dtype != DType::kF64) {
      store.add(t.name, TensorView{s.dtype, t.shape, bytes + static_cast<size_t>(t.offset) * esize},
                index);
      continue;
    }
    // A strided view (or doubles): gathered into an f32 copy.
    std::vector<float> v(static_cast<size_t>(t.shape.numel()));
    std::array<int64_t, kMaxRank> at{};
    for (float& out : v) {
      int64_t e = t.offset;
      for (int d = 0; d < t.shape.rank; ++d) e += at[d] * t.strides[d];
      const uint8_t* src = bytes + static_cast<size_t>(e) * esize;
      switch (s.dtype) {
        case DType::kF32:
          std::memcpy(&out, src, 4);
          break;
        case DType::kF64: {
          double x;
          std::memcpy(&x, src, 8);
          out = static_cast<float>(x);
          break;
        }
        default: {
          uint16_t h;
          std::memcpy(&h, src, 2);
          out = s.dtype == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
          break;
        }
      }
      for (int d = t.shape.rank - 1; d >= 0; --d) {
        if (++at[d] < t.shape.dims[d]) break;
        at[d] = 0;
      }
    }
    store.add_f32(t.name, t.shape, std::move(v), index);
  }
}

bool has_torch_checkpoint(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  return fs::exists(fs::path(dir) / "pytorch_model.bin", ec) ||
         fs::exists(fs::path(dir) / "pytorch_model.bin.index.json", ec);
}

void load_torch_dir(const std::string& dir, WeightStore& store) {
  namespace fs = std::filesystem;
  const fs::path single = fs::path(dir) / "pytorch_model.bin";
  if (fs::exists(single)) {
    load_torch_file(single.string(), store);
    return;
  }
  const fs::path index = fs::path(dir) / "pytorch_model.bin.index.json";
  if (!fs::exists(index))
    fail(ErrorKind::kNotFound, "'{}': no pytorch_model.bin or pytorch_model.bin.index.json", dir);
  load_shards(index.string(), store, load_torch_file);
}

}  // namespace tf
