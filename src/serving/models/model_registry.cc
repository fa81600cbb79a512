#include "serving/models/model_registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <new>
#include <random>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "core/memory.h"

namespace tf {
namespace {

namespace fs = std::filesystem;

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

double mib(int64_t bytes) {
  return static_cast<double>(bytes) / (1 << 20);
}

}  // namespace

const char* version_state_name(VersionState s) {
  switch (s) {
    case VersionState::kStart:
      return "START";
    case VersionState::kLoading:
      return "LOADING";
    case VersionState::kAvailable:
      return "AVAILABLE";
    case VersionState::kUnloading:
      return "UNLOADING";
    case VersionState::kEnd:
      return "END";
    case VersionState::kUnknown:
      break;
  }
  return "UNKNOWN";
}

ModelRegistry::ModelRegistry(Loader loader) : loader_(std::move(loader)) {}

ModelRegistry::ModelRegistry(Loader loader, Options options)
    : loader_(std::move(loader)), options_(std::move(options)) {}

ModelRegistry::~ModelRegistry() {
  std::map<std::string, Entry> gone;
  {
    std::lock_guard lock(mu_);
    gone.swap(models_);
  }
  // The models (and their engines' threads) go here, outside the lock.
}

void ModelRegistry::apply(std::vector<ModelEntryConfig> models) {
  std::set<std::string> names;
  for (const auto& m : models) {
    if (!names.insert(m.config.name()).second)
      fail(ErrorKind::kInvalidArgument, "model '{}' is configured twice", m.config.name());
  }
  std::vector<LoraSpec> adapters;
  for (const auto& m : models)
    for (const auto& l : m.config.lora()) {
      if (names.contains(l.name()))
        fail(ErrorKind::kInvalidArgument, "model '{}': LoRA adapter '{}' is the name of a model",
             m.config.name(), l.name());
      adapters.push_back({l.name(), m.config.name(), l.path()});
    }
  loras_.set_from_config(adapters);
  std::lock_guard lock(mu_);
  for (auto& [name, e] : models_) e.configured = names.contains(name);
  order_.clear();
  for (auto& m : models) {
    const std::string name = m.config.name();
    auto it = models_.find(name);
    if (it == models_.end()) {
      Entry e;
      e.cfg = std::move(m);
      models_.emplace(name, std::move(e));
    } else {
      it->second.cfg = std::move(m);
      it->second.configured = true;
      for (auto& [v, slot] : it->second.versions) slot.failed = false;  // a new config retries
    }
    order_.push_back(name);
  }
}

std::vector<std::pair<int64_t, std::string>> ModelRegistry::aspired(const Entry& e,
                                                                    std::string& error) const {
  const tfs::ModelConfig& c = e.cfg.config;
  const std::string& base = c.base_path();
  std::vector<std::pair<int64_t, std::string>> out;
  if (!platform_supported(c.model_platform())) {
    error = fmt::format(
        "model_platform '{}' cannot be served by tokenflow (leave it empty or use 'tokenflow' or "
        "'tensorflow')",
        c.model_platform());
    return out;
  }
  std::error_code ec;
  if (e.cfg.unversioned) {
    if (!fs::exists(base, ec)) error = fmt::format("{} does not exist", base);
    out.emplace_back(1, base);
    return out;
  }
  if (!fs::is_directory(base, ec)) {
    error = fmt::format("base_path {} is not a directory", base);
    return out;
  }
  const std::vector<int64_t> found = list_versions(base);
  if (found.empty()) {
    error =
        fmt::format("no versions under base_path {} (integer-named directories expected)", base);
    return out;
  }
  auto path_of = [&](int64_t v) { return (fs::path(base) / std::to_string(v)).string(); };
  const auto& policy = c.model_version_policy();
  if (policy.has_specific()) {
    std::vector<std::string> missing;
    for (int64_t v : policy.specific().versions()) {
      if (std::binary_search(found.begin(), found.end(), v)) {
        out.emplace_back(v, path_of(v));
      } else {
        missing.push_back(std::to_string(v));
      }
    }
    if (!missing.empty()) {
      error =
          fmt::format("version(s) {} not found under base_path {}", fmt::join(missing, ", "), base);
    }
  } else if (policy.has_all()) {
    for (int64_t v : found) out.emplace_back(v, path_of(v));
  } else {
    const size_t n = std::max<uint32_t>(1, policy.latest().num_versions());
    for (size_t i = found.size() > n ? found.size() - n : 0; i < found.size(); ++i)
      out.emplace_back(found[i], path_of(found[i]));
  }
  return out;
}

int64_t ModelRegistry::memory_locked() const {
  int64_t sum = 0;
  for (const auto& [name, e] : models_)
    for (const auto& [v, s] : e.versions)
      if (s.model) sum += s.bytes;
  return sum;
}

void ModelRegistry::sync() {
  std::lock_guard one(sync_mu_);
  struct Load {
    std::string name;
    int64_t version;
    std::string path;
    tfs::ModelConfig config;
  };
  std::vector<Load> loads;
  std::map<std::string, std::set<int64_t>> wanted;
  {
    std::lock_guard lock(mu_);
    for (auto& [name, e] : models_) {
      if (!e.configured) continue;
      std::string error;
      const auto asp = aspired(e, error);
      e.error = error;
      auto& want = wanted[name];
      for (const auto& [v, path] : asp) {
        want.insert(v);
        Slot& slot = e.versions[v];
        if (slot.state == VersionState::kUnloading && slot.model) {
          slot.state = VersionState::kAvailable;  // wanted again before it went
          continue;
        }
        if (slot.state == VersionState::kAvailable || slot.failed) continue;
        slot.path = path;
        slot.state = VersionState::kStart;
        slot.error.clear();
        loads.push_back({name, v, path, e.cfg.config});
      }
    }
  }

  for (const Load& l : loads) {
    int64_t estimate = 0, in_use = 0;
    {
      std::lock_guard lock(mu_);
      Slot& slot = models_.at(l.name).versions.at(l.version);
      slot.state = VersionState::kLoading;
      in_use = memory_locked();
    }
    std::string error;
    const char* oom = nullptr;  // the out-of-memory reason a refusal counts under
    std::shared_ptr<ServedModel> model;
    int64_t bytes = 0;
    if (options_.memory_budget > 0 && options_.estimate) estimate = options_.estimate(l.path);
    if (estimate > 0 && in_use + estimate > options_.memory_budget) {
      error = fmt::format(
          "not loaded: needs about {:.0f} MiB, {:.0f} MiB of the {:.0f} MiB memory budget are in "
          "use",
          mib(estimate), mib(in_use), mib(options_.memory_budget));
      oom = "model_load_memory_budget";
    } else {
      log::info("loading model '{}' version {} from {}", l.name, l.version, l.path);
      try {
        model = loader_(l.name, l.version, l.path, l.config);
        if (options_.measure) bytes = options_.measure(*model);
      } catch (const std::bad_alloc&) {
        error = "not loaded: memory allocation failed";
        oom = "allocation_failure";
      } catch (const std::exception& ex) {
        error = ex.what();
      }
      if (error.empty() && options_.memory_budget > 0 && in_use + bytes > options_.memory_budget) {
        oom = "model_load_memory_budget";
        error = fmt::format(
            "unloaded: takes {:.0f} MiB, {:.0f} MiB of the {:.0f} MiB memory budget are in use",
            mib(bytes), mib(in_use), mib(options_.memory_budget));
        model.reset();
      }
    }
    std::lock_guard lock(mu_);
    if (oom) ++load_ooms_[{l.name, oom}];
    Slot& slot = models_.at(l.name).versions.at(l.version);
    if (error.empty()) {
      slot.model = std::move(model);
      slot.bytes = bytes;
      slot.state = VersionState::kAvailable;
      log::info("model '{}' version {} is available ({:.2f} s)", l.name, l.version,
                slot.model->load_seconds);
    } else {
      slot.state = VersionState::kEnd;
      slot.error = error;
      slot.failed = true;
      log::error("model '{}' version {}: {}", l.name, l.version, error);
    }
  }

  std::vector<std::shared_ptr<ServedModel>> released;
  {
    std::lock_guard lock(mu_);
    for (auto& [name, e] : models_) {
      const std::set<int64_t>& want = wanted[name];
      // (e named again: a structured binding in a lambda is C++20 that clang 14 lacks.)
      auto available = [&entry = e](int64_t v) {
        auto it = entry.versions.find(v);
        return it != entry.versions.end() && it->second.state == VersionState::kAvailable;
      };
      // Labels move only to available versions; one that cannot stays where it was.
      std::map<std::string, int64_t> labels;
      std::vector<std::string> waiting;
      if (e.configured) {
        for (const auto& [label, v] : e.cfg.config.version_labels()) {
          if (available(v)) {
            labels[label] = v;
          } else {
            waiting.push_back(fmt::format("label '{}' waits for version {}", label, v));
            if (auto old = e.labels.find(label); old != e.labels.end() && available(old->second))
              labels[label] = old->second;
          }
        }
      }
      e.labels = std::move(labels);
      if (!waiting.empty()) {
        const std::string w = fmt::format("{} (not available)", fmt::join(waiting, "; "));
        e.error = e.error.empty() ? w : e.error + "; " + w;
      }
      // Out of routing: versions no longer wanted, once a wanted one serves (or the model is
      // gone from the config).
      bool serving_wanted = false;
      for (int64_t v : want) serving_wanted = serving_wanted || available(v);
      for (auto& [v, slot] : e.versions) {
        if (slot.state == VersionState::kAvailable && !want.contains(v) &&
            (serving_wanted || !e.configured)) {
          slot.state = VersionState::kUnloading;
          log::info("model '{}' version {}: unloading once its requests finish", name, v);
        }
      }
    }
    release_locked(released);
  }
  drop(released);
}

void ModelRegistry::drop(std::vector<std::shared_ptr<ServedModel>>& released) {
  if (released.empty()) return;
  released.clear();  // engines stop here, outside the lock
  // A version frees its weights, buffers and threads' arenas at once; hand the pages back
  // rather than leave them in malloc's free lists (measured in the soak test, docs/status.md).
  release_free_memory();
}

void ModelRegistry::release_locked(std::vector<std::shared_ptr<ServedModel>>& released) {
  for (auto& [name, e] : models_) {
    for (auto& [v, slot] : e.versions) {
      // No request holds it, and none can take it (only AVAILABLE versions resolve).
      if (slot.state == VersionState::kUnloading && slot.model.use_count() == 1) {
        released.push_back(std::move(slot.model));
        slot.model.reset();
        slot.state = VersionState::kEnd;
        log::info("model '{}' version {} unloaded", name, v);
      }
    }
  }
  for (auto it = models_.begin(); it != models_.end();) {
    const bool idle = std::all_of(it->second.versions.begin(), it->second.versions.end(),
                                  [](const auto& kv) { return !kv.second.model; });
    if (!it->second.configured && idle) {
      it = models_.erase(it);
    } else {
      ++it;
    }
  }
}

void ModelRegistry::reap() {
  std::vector<std::shared_ptr<ServedModel>> released;
  {
    std::lock_guard lock(mu_);
    release_locked(released);
  }
  drop(released);
}

std::shared_ptr<ServedModel> ModelRegistry::pick_default(const Entry& e,
                                                         std::string_view sticky_key) const {
  auto version_model = [&](int64_t v) -> std::shared_ptr<ServedModel> {
    auto it = e.versions.find(v);
    if (it == e.versions.end() || it->second.state != VersionState::kAvailable) return nullptr;
    return it->second.model;
  };
  if (e.cfg.config.has_traffic_split()) {
    std::vector<std::pair<uint64_t, std::shared_ptr<ServedModel>>> routes;
    uint64_t total = 0;
    for (const auto& r : e.cfg.config.traffic_split().route()) {
      std::shared_ptr<ServedModel> m;
      if (r.has_version()) {
        m = version_model(r.version());
      } else if (auto l = e.labels.find(r.label()); l != e.labels.end()) {
        m = version_model(l->second);
      }
      if (!m) continue;  // a route without an available target takes no traffic
      total += r.weight();
      routes.emplace_back(total, std::move(m));
    }
    if (total > 0) {
      uint64_t point;
      if (!sticky_key.empty()) {
        point = fnv1a(sticky_key) % total;
      } else {
        thread_local std::mt19937_64 rng(std::random_device{}());
        point = std::uniform_int_distribution<uint64_t>(0, total - 1)(rng);
      }
      for (const auto& [end, m] : routes)
        if (point < end) return m;
    }
  }
  for (auto it = e.versions.rbegin(); it != e.versions.rend(); ++it) {
    if (it->second.state == VersionState::kAvailable) return it->second.model;
  }
  return nullptr;
}

std::shared_ptr<ServedModel> ModelRegistry::resolve(const ModelRequestSpec& spec,
                                                    std::string_view user,
                                                    const HeaderFn& header) const {
  std::lock_guard lock(mu_);
  auto it = models_.find(spec.name);
  if (it == models_.end() || !it->second.configured) return nullptr;
  const Entry& e = it->second;
  if (spec.version) {
    auto v = e.versions.find(*spec.version);
    if (v == e.versions.end() || v->second.state != VersionState::kAvailable) return nullptr;
    return v->second.model;
  }
  if (spec.label) {
    auto l = e.labels.find(*spec.label);
    if (l == e.labels.end()) return nullptr;
    return e.versions.at(l->second).model;
  }
  std::string key(user);
  if (key.empty() && header && e.cfg.config.has_traffic_split() &&
      !e.cfg.config.traffic_split().sticky_header().empty()) {
    key = header(e.cfg.config.traffic_split().sticky_header());
  }
  return pick_default(e, key);
}

std::string ModelRegistry::unavailable_reason(const ModelRequestSpec& spec) const {
  std::lock_guard lock(mu_);
  auto it = models_.find(spec.name);
  if (it == models_.end() || !it->second.configured)
    return fmt::format("The model '{}' does not exist", spec.name);
  const Entry& e = it->second;
  if (spec.version) {
    auto v = e.versions.find(*spec.version);
    if (v == e.versions.end())
      return fmt::format("model '{}' has no version {}", spec.name, *spec.version);
    return fmt::format("version {} of model '{}' is {}{}", *spec.version, spec.name,
                       version_state_name(v->second.state),
                       v->second.error.empty() ? "" : ": " + v->second.error);
  }
  if (spec.label)
    return fmt::format("model '{}' has no available version labelled '{}'", spec.name, *spec.label);
  return fmt::format("model '{}' has no available version{}", spec.name,
                     e.error.empty() ? "" : ": " + e.error);
}

ModelRequestSpec ModelRegistry::parse_model_field(const std::string& field) const {
  std::lock_guard lock(mu_);
  if (field.empty()) return {order_.empty() ? std::string() : order_.front(), {}, {}};
  if (models_.contains(field)) return {field, {}, {}};
  if (const size_t at = field.rfind('@'); at != std::string::npos)
    return {field.substr(0, at), {}, field.substr(at + 1)};
  if (const size_t colon = field.rfind(':'); colon != std::string::npos) {
    const std::string digits = field.substr(colon + 1);
    int64_t v = 0;
    const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (!digits.empty() && r.ec == std::errc() && r.ptr == digits.data() + digits.size())
      return {field.substr(0, colon), v, {}};
  }
  return {field, {}, {}};
}

std::optional<std::vector<VersionStatus>> ModelRegistry::status(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end() || !it->second.configured) return std::nullopt;
  std::vector<VersionStatus> out;
  for (const auto& [v, s] : it->second.versions) out.push_back({v, s.state, s.error});
  return out;
}

std::string ModelRegistry::model_error(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = models_.find(name);
  return it == models_.end() ? std::string() : it->second.error;
}

std::vector<std::string> ModelRegistry::names() const {
  std::lock_guard lock(mu_);
  return order_;
}

std::vector<std::shared_ptr<ServedModel>> ModelRegistry::available() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<ServedModel>> out;
  for (const auto& name : order_) {
    for (const auto& [v, s] : models_.at(name).versions)
      if (s.state == VersionState::kAvailable) out.push_back(s.model);
  }
  return out;
}

std::map<std::string, int64_t> ModelRegistry::labels(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = models_.find(name);
  return it == models_.end() ? std::map<std::string, int64_t>{} : it->second.labels;
}

std::map<std::pair<std::string, std::string>, int64_t> ModelRegistry::load_ooms() const {
  std::lock_guard lock(mu_);
  return load_ooms_;
}

int64_t ModelRegistry::memory_in_use() const {
  std::lock_guard lock(mu_);
  return memory_locked();
}

}  // namespace tf
