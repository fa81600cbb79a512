// The model registry and its config: TF Serving's text format (valid files with every policy,
// broken ones with their errors), version policies over real directories, states, labels,
// traffic splits, stickiness, failed loads, the memory budget, and unloading only after the
// last request lets go. The loader is a stand-in that records what it loaded.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "core/error.h"
#include "serving/models/model_registry.h"
#include "serving/models/server_config.h"

namespace tf {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::string& text) {
  try {
    parse_model_server_config(text, "models.config");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfigFile, ParsesEveryPolicyLabelsAndTheSplit) {
  const auto c = parse_model_server_config(R"(
model_config_list {
  config {
    name: 'chat'
    base_path: '/models/chat'
    model_platform: 'tokenflow'
    model_version_policy { specific { versions: 42 versions: 43 } }
    version_labels { key: 'stable' value: 42 }
    version_labels { key: 'canary' value: 43 }
    traffic_split { route { label: 'stable' weight: 90 } route { label: 'canary' weight: 10 } }
  }
  config { name: "sum" base_path: "/models/sum" model_version_policy { latest { num_versions: 2 } } }
  config { name: "all" base_path: "/models/all" model_version_policy { all {} } }
  config { name: "default" base_path: "/models/default" model_platform: "tensorflow" }
})",
                                           "models.config");
  const auto e = model_entries(c);
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[0].config.model_version_policy().specific().versions_size(), 2);
  EXPECT_EQ(e[0].config.version_labels().at("canary"), 43);
  EXPECT_EQ(e[0].config.traffic_split().route(1).weight(), 10u);
  EXPECT_EQ(e[1].config.model_version_policy().latest().num_versions(), 2u);
  EXPECT_TRUE(e[2].config.model_version_policy().has_all());
  EXPECT_FALSE(e[3].config.has_model_version_policy());
  // A platform tokenflow cannot run parses; the registry reports it per model.
  EXPECT_EQ(e[3].config.model_platform(), "tensorflow");
}

TEST(ModelConfigFile, BrokenFilesSayWhatAndWhere) {
  // Syntax error: line and column.
  EXPECT_EQ(error_of("model_config_list {\n  config { name: 'a' base_path: '/x' \n"),
            "models.config:3:1: Expected identifier, got: ");
  EXPECT_NE(
      error_of("model_config_list {\n  config {\n    name 'a'\n  }\n}").find("models.config:3:10"),
      std::string::npos);
  // Unknown field.
  EXPECT_NE(error_of("model_config_list { config { name: 'a' base_pth: '/x' } }")
                .find("no field named \"base_pth\""),
            std::string::npos);
  EXPECT_EQ(error_of("model_config_list { config { name: 'a' base_path: '/x' } config { name: 'a' "
                     "base_path: '/y' } }"),
            "model 'a' is configured twice");
  EXPECT_EQ(error_of("model_config_list { config { name: 'a' } }"), "model 'a' has no base_path");
  EXPECT_EQ(error_of("model_config_list { config { base_path: '/x' } }"),
            "a model config has no name");
  EXPECT_NE(error_of("model_config_list { config { name: 'a:b' base_path: '/x' } }")
                .find("may not contain ':'"),
            std::string::npos);
  EXPECT_NE(error_of("model_config_list { config { name: 'a' base_path: '/x' version_labels { "
                     "key: 'no-dash' value: 1 } } }")
                .find("label 'no-dash'"),
            std::string::npos);
  EXPECT_NE(error_of("model_config_list { config { name: 'a' base_path: '/x' "
                     "model_version_policy { specific { } } } }")
                .find("lists no versions"),
            std::string::npos);
  EXPECT_NE(error_of("model_config_list { config { name: 'a' base_path: '/x' traffic_split { "
                     "route { label: 'stable' weight: 1 } } } }")
                .find("version_labels does not define"),
            std::string::npos);
  EXPECT_NE(error_of("model_config_list { config { name: 'a' base_path: '/x' traffic_split { "
                     "route { version: 1 weight: 0 } } } }")
                .find("weights must be > 0"),
            std::string::npos);
  EXPECT_NE(error_of("custom_model_config { }").find("custom_model_config is not supported"),
            std::string::npos);
  // Two policies at once: the text format refuses a second member of a oneof.
  EXPECT_NE(error_of("model_config_list { config { name: 'a' base_path: '/x' model_version_policy "
                     "{ all {} latest {} } } }"),
            "");
}

// TF Serving's --batching_parameters_file: each field onto the engine, the padding ones checked
// as TF Serving checks them and noted.
TEST(BatchingParametersFile, MapsOntoTheEngineAndChecksAsTfServing) {
  const BatchingSettings b = parse_batching_parameters(
      "max_batch_size { value: 32 }\nbatch_timeout_micros { value: 5000 }\n"
      "max_enqueued_batches { value: 100 }\nnum_batch_threads { value: 4 }\n"
      "allowed_batch_sizes: 8\nallowed_batch_sizes: 32\npad_variable_length_inputs: true\n",
      "batching.config");
  EXPECT_EQ(b.max_num_seqs, 32);
  EXPECT_EQ(b.batch_timeout_micros, 5000);
  EXPECT_EQ(b.max_enqueued_batches, 100);
  EXPECT_EQ(b.threads, 4);
  EXPECT_EQ(b.notes.size(), 2u);  // allowed_batch_sizes and pad_variable_length_inputs
  // An empty file changes nothing.
  const BatchingSettings none = parse_batching_parameters("", "b");
  EXPECT_FALSE(none.max_num_seqs || none.batch_timeout_micros || none.threads);
  // Large batch splitting: a step runs max_execution_batch_size rows.
  EXPECT_EQ(parse_batching_parameters("max_batch_size { value: 1024 } "
                                      "enable_large_batch_splitting: true "
                                      "max_execution_batch_size { value: 64 }",
                                      "b")
                .max_num_seqs,
            64);
  auto error = [](const char* text) {
    try {
      parse_batching_parameters(text, "batching.config");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("max_batch_size { value: 0 }").find("max_batch_size must be >= 1"),
            std::string::npos);
  EXPECT_NE(error("max_batch_size { value: 32 } allowed_batch_sizes: 16 allowed_batch_sizes: 8")
                .find("monotonically increasing"),
            std::string::npos);
  EXPECT_NE(error("max_batch_size { value: 32 } allowed_batch_sizes: 16")
                .find("must equal max_batch_size (32)"),
            std::string::npos);
  EXPECT_NE(error("max_batch_size { value: 8 }\nbatch_priority_queue: 1").find("batching.config:2"),
            std::string::npos);  // a field tokenflow does not know: named, with its place
}

// A base path with version directories, and a loader that records loads and fails on demand.
class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() /
            ("tf_registry_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    fs::create_directories(base_);
  }
  void TearDown() override { fs::remove_all(base_); }

  void add_version(int64_t v) { fs::create_directories(base_ / std::to_string(v)); }
  void remove_version(int64_t v) { fs::remove_all(base_ / std::to_string(v)); }

  ModelRegistry::Loader loader() {
    return [this](const std::string& name, int64_t version, const std::string& path,
                  const tfs::ModelConfig&) {
      ++loads_;
      if (fail_.contains(version)) throw Error(ErrorKind::kInvalidArgument, "corrupt weights");
      auto m = std::make_shared<ServedModel>();
      m->name = name;
      m->version = version;
      m->path = path;
      return m;
    };
  }

  ModelEntryConfig entry(const std::string& text) {
    auto c = parse_model_server_config("model_config_list { config { name: 'm' base_path: '" +
                                           base_.string() + "' " + text + " } }",
                                       "test");
    return model_entries(c)[0];
  }

  std::map<int64_t, VersionState> states(const ModelRegistry& r) {
    std::map<int64_t, VersionState> out;
    const auto versions = r.status("m").value();
    for (const auto& v : versions) out[v.version] = v.state;
    return out;
  }

  fs::path base_;
  std::atomic<int> loads_{0};
  std::set<int64_t> fail_;
};

TEST_F(RegistryTest, PoliciesChooseTheVersions) {
  for (int v : {1, 2, 3}) add_version(v);
  using S = VersionState;
  {
    ModelRegistry r(loader());
    r.apply({entry("")});  // latest, 1 version
    r.sync();
    EXPECT_EQ(states(r), (std::map<int64_t, S>{{3, S::kAvailable}}));
    EXPECT_EQ(r.resolve({"m", {}, {}})->version, 3);
    EXPECT_EQ(r.resolve({"m", 2, {}}), nullptr);
    EXPECT_EQ(r.unavailable_reason({"m", 2, {}}), "model 'm' has no version 2");
  }
  {
    ModelRegistry r(loader());
    r.apply({entry("model_version_policy { latest { num_versions: 2 } }")});
    r.sync();
    EXPECT_EQ(states(r), (std::map<int64_t, S>{{2, S::kAvailable}, {3, S::kAvailable}}));
  }
  {
    ModelRegistry r(loader());
    r.apply({entry("model_version_policy { all {} }")});
    r.sync();
    EXPECT_EQ(r.available().size(), 3u);
  }
  {
    ModelRegistry r(loader());
    r.apply({entry("model_version_policy { specific { versions: 1 versions: 3 versions: 7 } }")});
    r.sync();
    EXPECT_EQ(states(r), (std::map<int64_t, S>{{1, S::kAvailable}, {3, S::kAvailable}}));
    EXPECT_EQ(r.model_error("m"), "version(s) 7 not found under base_path " + base_.string());
    EXPECT_EQ(r.resolve({"m", 1, {}})->version, 1);
  }
}

TEST_F(RegistryTest, EmptyBasePathAndUnknownPlatformAreModelErrors) {
  ModelRegistry r(loader());
  r.apply({entry("")});
  r.sync();
  EXPECT_NE(r.model_error("m").find("no versions under base_path"), std::string::npos);
  EXPECT_EQ(r.resolve({"m", {}, {}}), nullptr);
  add_version(5);
  r.sync();  // a version appears: served
  EXPECT_EQ(r.resolve({"m", {}, {}})->version, 5);
  ModelRegistry t(loader());  // TF Serving's platform name serves the same directories
  t.apply({entry("model_platform: 'tensorflow'")});
  t.sync();
  EXPECT_EQ(t.model_error("m"), "");
  EXPECT_EQ(t.resolve({"m", {}, {}})->version, 5);
  ModelRegistry u(loader());
  u.apply({entry("model_platform: 'pytorch'")});
  u.sync();
  EXPECT_NE(u.model_error("m").find("model_platform 'pytorch' cannot be served"),
            std::string::npos);
  EXPECT_EQ(loads_.load(), 2);
}

TEST_F(RegistryTest, ANewVersionServesBeforeTheOldOneLeavesAndInFlightRequestsKeepIt) {
  add_version(1);
  ModelRegistry r(loader());
  r.apply({entry("")});
  r.sync();
  auto in_flight = r.resolve({"m", {}, {}});  // a request holding version 1
  ASSERT_EQ(in_flight->version, 1);
  add_version(2);
  r.sync();
  using S = VersionState;
  EXPECT_EQ(states(r), (std::map<int64_t, S>{{1, S::kUnloading}, {2, S::kAvailable}}));
  EXPECT_EQ(r.resolve({"m", {}, {}})->version, 2);  // new requests go to 2
  EXPECT_EQ(r.resolve({"m", 1, {}}), nullptr);      // 1 takes none
  r.reap();
  EXPECT_EQ(states(r)[1], S::kUnloading);  // still held
  in_flight.reset();
  r.reap();
  EXPECT_EQ(states(r)[1], S::kEnd);
  // Rolling back by removing the newest directory: 1 loads again, then 2 leaves.
  remove_version(2);
  r.sync();
  EXPECT_EQ(states(r), (std::map<int64_t, S>{{1, S::kAvailable}, {2, S::kEnd}}));
  // No version directory at all: the last version keeps serving (never none while one could).
  remove_version(1);
  r.sync();
  EXPECT_NE(r.model_error("m").find("no versions"), std::string::npos);
  EXPECT_EQ(r.resolve({"m", {}, {}})->version, 1);
}

TEST_F(RegistryTest, ACorruptVersionShowsItsErrorWhileTheOtherServes) {
  add_version(1);
  add_version(2);
  fail_ = {2};
  ModelRegistry r(loader());
  r.apply({entry("model_version_policy { all {} }")});
  r.sync();
  const auto st = r.status("m").value();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].state, VersionState::kAvailable);
  EXPECT_EQ(st[1].state, VersionState::kEnd);
  EXPECT_EQ(st[1].error, "corrupt weights");
  EXPECT_EQ(r.resolve({"m", {}, {}})->version, 1);  // latest available
  const int loads = loads_;
  r.sync();  // a failed version is not retried by polling...
  EXPECT_EQ(loads_.load(), loads);
  fail_.clear();
  r.apply({entry("model_version_policy { all {} }")});  // ...but a reload retries it
  r.sync();
  EXPECT_EQ(r.resolve({"m", {}, {}})->version, 2);
}

TEST_F(RegistryTest, LabelsMoveOnlyToAvailableVersions) {
  add_version(1);
  add_version(2);
  ModelRegistry r(loader());
  r.apply(
      {entry("model_version_policy { all {} } version_labels { key: 'stable' value: 1 } "
             "version_labels { key: 'canary' value: 2 }")});
  r.sync();
  EXPECT_EQ(r.resolve({"m", {}, std::string("stable")})->version, 1);
  EXPECT_EQ(r.resolve({"m", {}, std::string("canary")})->version, 2);
  EXPECT_EQ(r.resolve({"m", {}, std::string("beta")}), nullptr);
  // Switch stable to 2 and point canary at a version that does not exist: canary stays.
  r.apply(
      {entry("model_version_policy { all {} } version_labels { key: 'stable' value: 2 } "
             "version_labels { key: 'canary' value: 9 }")});
  r.sync();
  EXPECT_EQ(r.resolve({"m", {}, std::string("stable")})->version, 2);
  EXPECT_EQ(r.resolve({"m", {}, std::string("canary")})->version, 2);
  EXPECT_NE(r.model_error("m").find("label 'canary' waits for version 9"), std::string::npos);
}

TEST_F(RegistryTest, TrafficSplitIsWeightedAndStickyPerUser) {
  add_version(1);
  add_version(2);
  ModelRegistry r(loader());
  r.apply(
      {entry("model_version_policy { all {} } version_labels { key: 'stable' value: 1 } "
             "version_labels { key: 'canary' value: 2 } traffic_split { route { label: "
             "'stable' weight: 90 } route { label: 'canary' weight: 10 } sticky_header: "
             "'x-user' }")});
  r.sync();
  int canary = 0;
  for (int i = 0; i < 2000; ++i) canary += r.resolve({"m", {}, {}})->version == 2;
  // Binomial(2000, 0.1): mean 200, sd 13.4; 5 sd either side.
  EXPECT_GT(canary, 133);
  EXPECT_LT(canary, 267);
  // One user, one version; many users spread over both in proportion.
  int users_on_canary = 0;
  for (int u = 0; u < 2000; ++u) {
    const std::string user = "user-" + std::to_string(u);
    const int64_t v = r.resolve({"m", {}, {}}, user)->version;
    for (int k = 0; k < 5; ++k) ASSERT_EQ(r.resolve({"m", {}, {}}, user)->version, v);
    users_on_canary += v == 2;
  }
  EXPECT_GT(users_on_canary, 133);
  EXPECT_LT(users_on_canary, 267);
  // The sticky header stands in for the user.
  auto header = [](const std::string& h) { return h == "x-user" ? std::string("alice") : ""; };
  const int64_t alice = r.resolve({"m", {}, {}}, "", header)->version;
  for (int k = 0; k < 20; ++k) EXPECT_EQ(r.resolve({"m", {}, {}}, "", header)->version, alice);
  EXPECT_EQ(r.resolve({"m", {}, {}}, "alice")->version, alice);
  // Explicit versions and labels bypass the split.
  for (int k = 0; k < 20; ++k) EXPECT_EQ(r.resolve({"m", 2, {}}, "alice")->version, 2);
}

TEST_F(RegistryTest, MemoryBudgetRefusesWhatDoesNotFit) {
  add_version(1);
  add_version(2);
  ModelRegistry::Options o;
  o.memory_budget = 150 << 20;
  o.estimate = [](const std::string&) { return int64_t{100} << 20; };
  o.measure = [](const ServedModel&) { return int64_t{100} << 20; };
  ModelRegistry r(loader(), o);
  r.apply({entry("model_version_policy { all {} }")});
  r.sync();
  const auto st = r.status("m").value();
  EXPECT_EQ(st[0].state, VersionState::kAvailable);
  EXPECT_EQ(st[1].state, VersionState::kEnd);
  EXPECT_NE(st[1].error.find("memory budget"), std::string::npos) << st[1].error;
  EXPECT_EQ(r.memory_in_use(), int64_t{100} << 20);
  EXPECT_EQ(loads_.load(), 1);  // refused before loading
}

TEST_F(RegistryTest, ModelFieldSyntaxAndRemovedModels) {
  add_version(4);
  ModelRegistry r(loader());
  auto other = entry("");
  other.config.set_name("org/other");
  r.apply({entry("version_labels { key: 'prod' value: 4 }"), other});
  r.sync();
  EXPECT_EQ(r.parse_model_field("").name, "m");  // the first model
  const auto v = r.parse_model_field("m:4");
  EXPECT_EQ(v.name, "m");
  EXPECT_EQ(*v.version, 4);
  const auto l = r.parse_model_field("m@prod");
  EXPECT_EQ(*l.label, "prod");
  EXPECT_EQ(r.resolve(l)->version, 4);
  EXPECT_EQ(r.parse_model_field("org/other").name, "org/other");
  EXPECT_FALSE(r.parse_model_field("m:x").version);
  // Removed from the config: unloaded once nothing holds it, gone from names and status.
  auto held = r.resolve({"org/other", {}, {}});
  r.apply({entry("")});
  r.sync();
  EXPECT_EQ(r.resolve({"org/other", {}, {}}), nullptr);
  EXPECT_FALSE(r.status("org/other"));
  EXPECT_EQ(r.names(), std::vector<std::string>{"m"});
  held.reset();
  r.reap();
  EXPECT_EQ(r.available().size(), 1u);
}

}  // namespace
}  // namespace tf
