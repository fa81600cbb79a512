// Python's arithmetic, concatenation, repetition and membership, with jinja2's Undefined raising
// wherever Python would call one of its operators.

#include <cmath>

#include "chat/jinja/interpreter.h"
#include "chat/jinja/py_format.h"
#include "chat/jinja/py_text.h"

namespace tf::jinja {

namespace {

const char* symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "+";
    case BinaryOp::kSub:
      return "-";
    case BinaryOp::kMul:
      return "*";
    case BinaryOp::kDiv:
      return "/";
    case BinaryOp::kFloorDiv:
      return "//";
    case BinaryOp::kMod:
      return "%";
    case BinaryOp::kPow:
      return "**";
  }
  return "?";
}

[[noreturn]] void unsupported(BinaryOp op, const Value& a, const Value& b) {
  render_fail("unsupported operand type(s) for {}: '{}' and '{}'", symbol(op), type_name(a),
              type_name(b));
}

void check_overflow(bool overflowed) {
  // Python integers do not overflow; ours are 64-bit.
  if (overflowed) render_fail("integer overflow (beyond 64 bits)");
}

Value int_op(BinaryOp op, int64_t a, int64_t b) {
  int64_t r = 0;
  switch (op) {
    case BinaryOp::kAdd:
      check_overflow(__builtin_add_overflow(a, b, &r));
      return Value(r);
    case BinaryOp::kSub:
      check_overflow(__builtin_sub_overflow(a, b, &r));
      return Value(r);
    case BinaryOp::kMul:
      check_overflow(__builtin_mul_overflow(a, b, &r));
      return Value(r);
    case BinaryOp::kDiv:
      if (b == 0) render_fail("division by zero");
      return Value(static_cast<double>(a) / static_cast<double>(b));
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: {
      if (b == 0) render_fail("integer division or modulo by zero");
      if (a == INT64_MIN && b == -1) {
        if (op == BinaryOp::kMod) return Value(int64_t{0});
        render_fail("integer overflow (beyond 64 bits)");
      }
      int64_t q = a / b, m = a % b;
      if (m != 0 && ((m < 0) != (b < 0))) {  // Python floors toward negative infinity
        --q;
        m += b;
      }
      return Value(op == BinaryOp::kMod ? m : q);
    }
    case BinaryOp::kPow: {
      if (b < 0) {
        if (a == 0) render_fail("0.0 cannot be raised to a negative power");
        return Value(std::pow(static_cast<double>(a), static_cast<double>(b)));
      }
      int64_t result = 1, base = a;
      for (int64_t e = b; e > 0; e >>= 1) {
        if (e & 1) check_overflow(__builtin_mul_overflow(result, base, &result));
        if (e > 1) check_overflow(__builtin_mul_overflow(base, base, &base));
      }
      return Value(result);
    }
  }
  return Value();
}

Value float_op(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::kAdd:
      return Value(a + b);
    case BinaryOp::kSub:
      return Value(a - b);
    case BinaryOp::kMul:
      return Value(a * b);
    case BinaryOp::kDiv:
      if (b == 0) render_fail("float division by zero");
      return Value(a / b);
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: {
      if (b == 0) render_fail("float modulo");
      // CPython's float_divmod.
      double mod = std::fmod(a, b);
      double div = (a - mod) / b;
      if (mod != 0) {
        if ((b < 0) != (mod < 0)) {
          mod += b;
          div -= 1.0;
        }
      } else {
        mod = std::copysign(0.0, b);
      }
      double floordiv;
      if (div != 0) {
        floordiv = std::floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
      } else {
        floordiv = std::copysign(0.0, a / b);
      }
      return Value(op == BinaryOp::kMod ? mod : floordiv);
    }
    case BinaryOp::kPow: {
      if (a == 0 && b < 0) render_fail("0.0 cannot be raised to a negative power");
      if (a < 0 && std::floor(b) != b) render_fail("negative number to a fractional power");
      const double r = std::pow(a, b);
      if (std::isinf(r) && std::isfinite(a) && std::isfinite(b)) {
        render_fail("numerical result out of range");
      }
      return Value(r);
    }
  }
  return Value();
}

// str * n and list * n.
Value repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty())
      in.check_string_size(s.size() * static_cast<size_t>(std::min<int64_t>(n, 1 << 30)));
    std::string out;
    for (int64_t i = 0; i < n && !s.empty(); ++i) out += s;
    in.charge(static_cast<int64_t>(out.size() / 64));
    return Value(std::move(out));
  }
  const auto& items = seq.as_list().items;
  if (!items.empty())
    in.check_list_size(items.size() * static_cast<size_t>(std::min<int64_t>(n, 1 << 30)));
  std::vector<Value> out;
  for (int64_t i = 0; i < n && !items.empty(); ++i)
    out.insert(out.end(), items.begin(), items.end());
  in.charge(static_cast<int64_t>(out.size()));
  return Value::list(std::move(out), seq.is_tuple());
}

// printf-style `str % args`: %s %r %d %i %f %e %g %x %o %c %% with flags, width, precision and
// %(name)s keys, as Python's str.__mod__ formats them.
Value percent_format(Interpreter& in, const std::string& format, const Value& args) {
  std::vector<Value> values;
  if (args.is_tuple()) {
    values = args.as_list().items;
  } else {
    values.push_back(args);
  }
  std::string out;
  size_t next = 0;
  auto fail_incomplete = [] { render_fail("incomplete format"); };
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) fail_incomplete();
    const Value* v = nullptr;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string::npos) render_fail("incomplete format key");
      if (!args.is_dict()) render_fail("format requires a mapping");
      v = args.as_dict().find(std::string_view(format).substr(i + 1, close - i - 1));
      if (v == nullptr) render_fail("'{}'", format.substr(i + 1, close - i - 1));
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() &&
           std::string_view("-+ #0").find(format[i]) != std::string_view::npos) {
      flags += format[i++];
    }
    std::string width, precision;
    while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i])))
      width += format[i++];
    const bool has_precision = i < format.size() && format[i] == '.';
    if (has_precision) {
      ++i;
      while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i])))
        precision += format[i++];
      if (precision.empty()) precision = "0";
    }
    if (i >= format.size()) fail_incomplete();
    const char conv = format[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (v == nullptr) {
      if (next >= values.size()) render_fail("not enough arguments for format string");
      v = &values[next++];
    }
    if (width.size() > 4 || precision.size() > 4) render_fail("format width or precision too big");
    const bool left = flags.find('-') != std::string::npos;
    std::string spec = left ? "<" : ">";
    std::string numeric_spec;
    if (flags.find('+') != std::string::npos) {
      numeric_spec += '+';
    } else if (flags.find(' ') != std::string::npos) {
      numeric_spec += ' ';
    }
    if (flags.find('#') != std::string::npos && conv != 'o') numeric_spec += '#';
    if (flags.find('0') != std::string::npos && !left) numeric_spec += '0';
    try {
      switch (conv) {
        case 's':
        case 'r':
        case 'a': {
          std::string text = conv == 's' ? to_str(*v) : to_repr(*v);
          if (has_precision) text = py_slice_code_points(text, std::stoul(precision));
          out += fmt::format(fmt::runtime("{:" + spec + width + "}"), text);
          break;
        }
        case 'd':
        case 'i':
        case 'u':
        case 'x':
        case 'X':
        case 'o':
        case 'c': {
          if (!v->is_number()) {
            render_fail("%{} format: a real number is required, not {}", conv, type_name(*v));
          }
          const int64_t n = v->is_float() ? static_cast<int64_t>(v->as_float()) : v->as_integral();
          if (conv == 'c') {
            std::string ch;
            append_utf8(ch, static_cast<char32_t>(n));
            out += fmt::format(fmt::runtime("{:" + spec + width + "}"), ch);
            break;
          }
          const char type = conv == 'x' ? 'x' : conv == 'X' ? 'X' : conv == 'o' ? 'o' : 'd';
          const std::string align = numeric_spec.find('0') != std::string::npos ? "" : spec;
          out += fmt::format(fmt::runtime("{:" + align + numeric_spec + width + type + "}"), n);
          break;
        }
        case 'f':
        case 'F':
        case 'e':
        case 'E':
        case 'g':
        case 'G': {
          if (!v->is_number()) render_fail("must be real number, not {}", type_name(*v));
          const std::string align = numeric_spec.find('0') != std::string::npos ? "" : spec;
          out += fmt::format(fmt::runtime("{:" + align + numeric_spec + width + "." +
                                          (has_precision ? precision : "6") + conv + "}"),
                             v->as_double());
          break;
        }
        default:
          throw TemplateError(
              ErrorKind::kUnsupported,
              fmt::format("unsupported format character '{}' in '%' formatting", conv));
      }
    } catch (const fmt::format_error& e) {
      render_fail("bad '%' format: {}", e.what());
    }
    in.check_string_size(out.size());
  }
  // Python treats any subscriptable right operand (dict, list, jinja2's Undefined) as a mapping
  // and then does not insist that every argument is used.
  const bool mapping_like =
      args.is_dict() || args.is_undefined() || (args.is_list() && !args.is_tuple());
  if (next < values.size() && !mapping_like) {
    render_fail("not all arguments converted during string formatting");
  }
  return Value(std::move(out));
}

}  // namespace

Value binary_op(Interpreter& in, BinaryOp op, const Value& a, const Value& b) {
  // str % x formats whatever x is, before x's own operators (Undefined's raise) get a say.
  if (op == BinaryOp::kMod && a.is_string()) return percent_format(in, a.as_string(), b);
  if (a.is_undefined()) render_fail("{}", a.undefined_reason());
  if (b.is_undefined()) render_fail("{}", b.undefined_reason());
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return float_op(op, a.as_double(), b.as_double());
    return int_op(op, a.as_integral(), b.as_integral());
  }
  if (op == BinaryOp::kAdd) {
    if (a.is_string() && b.is_string()) {
      in.check_string_size(a.as_string().size() + b.as_string().size());
      in.charge(static_cast<int64_t>((a.as_string().size() + b.as_string().size()) / 64));
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      const auto& x = a.as_list().items;
      const auto& y = b.as_list().items;
      in.check_list_size(x.size() + y.size());
      in.charge(static_cast<int64_t>(x.size() + y.size()));
      std::vector<Value> out = x;
      out.insert(out.end(), y.begin(), y.end());
      return Value::list(std::move(out), a.is_tuple());
    }
    if (a.is_string()) {
      render_fail("can only concatenate str (not \"{}\") to str", type_name(b));
    }
  }
  if (op == BinaryOp::kMul) {
    if ((a.is_string() || a.is_list()) && b.is_integral()) return repeat(in, a, b.as_integral());
    if ((b.is_string() || b.is_list()) && a.is_integral()) return repeat(in, b, a.as_integral());
  }
  unsupported(op, a, b);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;  // jinja2's Undefined iterates as empty
    case Value::Kind::kString:
      if (item.is_undefined()) render_fail("{}", item.undefined_reason());
      if (!item.is_string()) {
        render_fail("'in <string>' requires string as left operand, not {}", type_name(item));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.as_list().items) {
        if (equal(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      require_hashable(item);
      return container.as_dict().find(item) != nullptr;
    case Value::Kind::kGenerator: {
      const Generator& g = container.as_generator();
      if (!g.deferred_error.empty()) render_fail("{}", g.deferred_error);
      for (const Value& v : g.items) {
        if (equal(v, item)) return true;
      }
      return false;
    }
    default:
      render_fail("argument of type '{}' is not iterable", type_name(container));
  }
}

}  // namespace tf::jinja
