#include "serving/models/version_manager.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/log.h"

namespace tf {
namespace {

using Clock = std::chrono::steady_clock;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Unloading versions are released this often even when nothing is polled.
constexpr auto kReapInterval = std::chrono::milliseconds(200);

}  // namespace

VersionManager::VersionManager(ModelRegistry& registry, Options options)
    : registry_(registry), options_(std::move(options)) {}

VersionManager::~VersionManager() {
  stop();
}

void VersionManager::apply_file(bool force) {
  std::ifstream in(options_.config_file, std::ios::binary);
  if (!in) fail(ErrorKind::kNotFound, "cannot read model config file {}", options_.config_file);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (!force && text == last_text_) return;
  registry_.apply(model_entries(parse_model_server_config(text, options_.config_file)));
  last_text_ = text;
  log::info("applied model config file {}", options_.config_file);
}

void VersionManager::start(std::vector<ModelEntryConfig> entries) {
  if (!options_.config_file.empty()) {
    apply_file(true);
  } else {
    registry_.apply(std::move(entries));
  }
  registry_.sync();
  thread_ = std::thread([this] { loop(); });
}

void VersionManager::reload(std::optional<tfs::ModelServerConfig> config, Done done) {
  {
    std::lock_guard lock(mu_);
    pending_.emplace_back(std::move(config), std::move(done));
  }
  cv_.notify_all();
}

void VersionManager::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& [config, done] : pending_) done("the server is shutting down");
  pending_.clear();
}

void VersionManager::loop() {
  const bool poll_fs = options_.file_system_poll_s > 0;
  const bool poll_config = options_.config_poll_s > 0 && !options_.config_file.empty();
  auto next_fs = Clock::now() + seconds(options_.file_system_poll_s);
  auto next_config = Clock::now() + seconds(options_.config_poll_s);
  std::unique_lock lock(mu_);
  while (!stop_) {
    auto wake = Clock::now() + kReapInterval;
    if (poll_fs) wake = std::min(wake, next_fs);
    if (poll_config) wake = std::min(wake, next_config);
    cv_.wait_until(lock, wake, [&] { return stop_ || !pending_.empty(); });
    if (stop_) break;
    auto requests = std::move(pending_);
    pending_.clear();
    lock.unlock();

    std::vector<std::string> errors;
    bool changed = false;
    for (auto& [config, done] : requests) {
      std::string error;
      try {
        if (config) {
          registry_.apply(model_entries(*config));
        } else if (!options_.config_file.empty()) {
          apply_file(true);
        } else {
          error = "no --model_config_file to reload: send the config in the request";
        }
      } catch (const std::exception& e) {
        error = e.what();
      }
      changed = changed || error.empty();
      errors.push_back(error);
    }
    const auto now = Clock::now();
    if (poll_config && now >= next_config) {
      try {
        apply_file(false);
      } catch (const std::exception& e) {
        log::error("model config file not applied (still serving the previous one): {}", e.what());
      }
      next_config = now + seconds(options_.config_poll_s);
      changed = true;  // apply_file is a no-op when the text did not change
    }
    if (poll_fs && now >= next_fs) {
      next_fs = now + seconds(options_.file_system_poll_s);
      changed = true;
    }
    if (changed || !requests.empty()) {
      registry_.sync();
    } else {
      registry_.reap();
    }
    for (size_t i = 0; i < requests.size(); ++i) requests[i].second(errors[i]);
    lock.lock();
  }
}

}  // namespace tf
