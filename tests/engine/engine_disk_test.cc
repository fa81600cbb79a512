// The prefix cache's tier on disk (EngineConfig::kv_disk): blocks written by one engine serve
// another (a restart, a replica sharing the directory) with the same output as recomputing,
// under the same tenant only; entries that are truncated, corrupted or half written are misses.

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/sha256.h"
#include "engine_fixture.h"

namespace tf {
namespace {

namespace fs = std::filesystem;

class EngineDiskTest : public EngineTest {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           fmt::format("kv_disk_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  EngineConfig disk_config(int64_t blocks = 256, int64_t max_bytes = 1ll << 30) const {
    EngineConfig c = config(blocks, true);
    c.kv_disk.dir = dir_.string();
    c.kv_disk.max_bytes = max_bytes;
    c.kv_disk.namespace_id = "stories260K";
    return c;
  }
  // The block files in the directory.
  std::vector<fs::path> entries() const {
    std::vector<fs::path> out;
    if (!fs::exists(dir_)) return out;
    for (const auto& e : fs::recursive_directory_iterator(dir_))
      if (e.path().extension() == ".kv") out.push_back(e.path());
    return out;
  }
  static GenerationRequest salted(const std::string& text, uint64_t salt) {
    GenerationRequest r = greedy(text, 48);
    r.cache_salt = salt;
    return r;
  }

  fs::path dir_;
};

// Each prompt's 48 greedy tokens from an engine without a disk tier.
std::vector<Ids> outputs_alone(Model& model, const Tokenizer* tok, const EngineConfig& c) {
  Engine e(model, tok, {2}, c);
  std::vector<Ids> out;
  for (const char* p : kPrompts)
    out.push_back(run_to_completion(e, EngineTest::greedy(p, 48))[0].tokens);
  return out;
}

TEST_F(EngineDiskTest, ARestartedEngineLoadsThePrefixesFromDiskWithTheSameOutput) {
  const std::vector<Ids> alone = outputs_alone(*model_, tok_, config(256, false));
  {
    Engine first(*model_, tok_, {2}, disk_config());
    for (size_t i = 0; i < std::size(kPrompts); ++i)
      EXPECT_EQ(run_to_completion(first, greedy(kPrompts[i], 48))[0].tokens, alone[i]);
    first.flush_disk();
    const EngineStats s = first.stats();
    EXPECT_TRUE(s.kv_disk);
    EXPECT_GT(s.disk.written_blocks, 0);
    EXPECT_EQ(s.disk.hit_blocks, 0);  // nothing was there before
    EXPECT_EQ(static_cast<int64_t>(entries().size()), s.disk.written_blocks);
  }
  // A new engine (a restart: another pool, another hash key for the RAM cache) finds every
  // prompt's full blocks on disk and computes only the rest.
  Engine second(*model_, tok_, {2}, disk_config());
  for (size_t i = 0; i < std::size(kPrompts); ++i) {
    const GenerationRequest r = greedy(kPrompts[i], 48);
    const int64_t full = (static_cast<int64_t>(r.prompt.size()) - 1) / 16;
    const EngineStats before = second.stats();
    EXPECT_EQ(run_to_completion(second, r)[0].tokens, alone[i]) << kPrompts[i];
    second.wait_until_idle();
    const EngineStats after = second.stats();
    // The first prompt's blocks come from disk; the shared preamble's are in RAM after that.
    if (i == 0) {
      EXPECT_EQ(after.disk.hit_blocks - before.disk.hit_blocks, full);
      EXPECT_EQ(after.disk_loaded_tokens - before.disk_loaded_tokens, full * 16);
    }
    EXPECT_EQ(after.prefix_hit_tokens - before.prefix_hit_tokens, full * 16) << kPrompts[i];
  }
  EXPECT_EQ(second.stats().disk.corrupt, 0);
}

TEST_F(EngineDiskTest, WhatIsReadIsWhatTheModelAttendsTo) {
  // A block whose K/V were changed (and its checksum made to match) changes the output: the
  // blocks read are used, not recomputed. The same file with its checksum left alone is a miss.
  const Ids want = outputs_alone(*model_, tok_, config(256, false))[0];
  {
    Engine first(*model_, tok_, {2}, disk_config());
    run_to_completion(first, greedy(kPrompts[0], 48));
  }
  const auto files = entries();
  ASSERT_FALSE(files.empty());
  std::vector<std::vector<char>> original;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    original.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const auto rewrite = [&](bool fix_digest) {
    for (size_t i = 0; i < files.size(); ++i) {
      std::vector<char> bytes = original[i];
      const size_t payload = 56 + 16 * 4;
      for (size_t k = payload + 3; k + 32 < bytes.size(); k += 4) bytes[k] ^= 0x80;  // -K, -V
      if (fix_digest) {
        const Sha256Digest d = sha256(bytes.data(), bytes.size() - 32);
        std::copy(d.begin(), d.end(), bytes.end() - 32);
      }
      std::ofstream(files[i], std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
    }
  };
  rewrite(/*fix_digest=*/true);
  {
    Engine poisoned(*model_, tok_, {2}, disk_config());
    EXPECT_NE(run_to_completion(poisoned, greedy(kPrompts[0], 48))[0].tokens, want);
    poisoned.wait_until_idle();
    EXPECT_GT(poisoned.stats().disk.hit_blocks, 0);
  }
  rewrite(/*fix_digest=*/false);
  Engine checked(*model_, tok_, {2}, disk_config());
  EXPECT_EQ(run_to_completion(checked, greedy(kPrompts[0], 48))[0].tokens, want);
  checked.wait_until_idle();
  EXPECT_EQ(checked.stats().disk.hit_blocks, 0);
  EXPECT_EQ(checked.stats().disk.corrupt, 1);  // the first block: the load stops there
}

TEST_F(EngineDiskTest, TruncatedEntriesAndHalfWrittenFilesAreMisses) {
  // What a writer killed mid-write can leave (a temporary, never renamed into place) and what a
  // broken disk can (a truncated entry, an empty one): the next start answers as recomputing.
  const Ids want = outputs_alone(*model_, tok_, config(256, false))[0];
  {
    Engine first(*model_, tok_, {2}, disk_config());
    run_to_completion(first, greedy(kPrompts[0], 48));
  }
  auto files = entries();
  ASSERT_GE(files.size(), 2u);
  std::sort(files.begin(), files.end());
  fs::resize_file(files[0], fs::file_size(files[0]) / 2);
  fs::resize_file(files[1], 0);
  std::ofstream(dir_ / "tmp" / "4242.1.part", std::ios::binary) << "TFKVBLK1 half a block";
  Engine second(*model_, tok_, {2}, disk_config());
  for (int round = 0; round < 2; ++round)
    EXPECT_EQ(run_to_completion(second, greedy(kPrompts[0], 48))[0].tokens, want);
  second.wait_until_idle();
  const EngineStats s = second.stats();
  EXPECT_GE(s.disk.corrupt, 1);
  EXPECT_TRUE(fs::exists(dir_ / "tmp" / "4242.1.part"));  // a live writer's, for all it knows
}

TEST_F(EngineDiskTest, ATenantsBlocksOnDiskServeThatTenantAlone) {
  {
    Engine first(*model_, tok_, {2}, disk_config());
    run_to_completion(first, salted(kPrompts[0], 7));
  }
  Engine second(*model_, tok_, {2}, disk_config());
  run_to_completion(second, salted(kPrompts[0], 8));  // another tenant: nothing of tenant 7's
  second.wait_until_idle();
  EXPECT_EQ(second.stats().disk.hit_blocks, 0);
  EXPECT_EQ(second.stats().prefix_hit_tokens, 0);
  run_to_completion(second, salted(kPrompts[1], 7));  // tenant 7: its preamble from disk
  second.wait_until_idle();
  EXPECT_GT(second.stats().disk.hit_blocks, 0);
}

TEST_F(EngineDiskTest, TwoEnginesSharingADirectoryServeEachOther) {
  // Two replicas at once: what one writes, the other reads (and neither corrupts the other's).
  // Each has its model (a forward pass uses its model's buffers).
  const std::vector<Ids> alone = outputs_alone(*model_, tok_, config(256, false));
  const std::unique_ptr<Model> replica = load_model(testing::stories_bin());
  Engine a(*model_, tok_, {2}, disk_config());
  Engine b(*replica, tok_, {2}, disk_config());
  EXPECT_EQ(run_to_completion(a, greedy(kPrompts[0], 48))[0].tokens, alone[0]);
  a.flush_disk();
  EXPECT_EQ(run_to_completion(b, greedy(kPrompts[0], 48))[0].tokens, alone[0]);
  b.wait_until_idle();
  EXPECT_GT(b.stats().disk.hit_blocks, 0);
  // Both at once over every prompt.
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (Engine* e : {&a, &b})
    for (const char* p : kPrompts) streams.push_back(e->submit(greedy(p, 48)));
  for (size_t k = 0; k < streams.size(); ++k) {
    Ids got;
    RequestOutput o;
    while (streams[k]->next(o)) got.insert(got.end(), o.token_ids.begin(), o.token_ids.end());
    EXPECT_EQ(got, alone[k % std::size(kPrompts)]) << k;
  }
  a.flush_disk();
  b.flush_disk();
  EXPECT_EQ(a.stats().disk.corrupt + b.stats().disk.corrupt, 0);
}

TEST_F(EngineDiskTest, ARequestThatEndsWhileItsPrefixLoadsGivesItsBlocksBack) {
  {
    Engine first(*model_, tok_, {2}, disk_config());
    run_to_completion(first, greedy(kPrompts[0], 48));
  }
  Engine e(*model_, tok_, {2}, disk_config());
  // Past its deadline when it arrives: admitted (its load starts), then ended at the next step
  // while the disk may still be reading into the blocks taken for it.
  GenerationRequest late = greedy(kPrompts[0], 48);
  late.deadline = std::chrono::steady_clock::now();
  const auto out = run_to_completion(e, late);
  EXPECT_TRUE(out[0].tokens.empty());
  wait_until([&] { return e.stats().disk.lookups == 1 && e.stats().kv_blocks_used == 0; });
  EXPECT_EQ(e.stats().disk.lookups, 1);
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
  // The blocks read were not registered for a request that ended: the next one reads them again.
  const Ids want = outputs_alone(*model_, tok_, config(256, false))[0];
  EXPECT_EQ(run_to_completion(e, greedy(kPrompts[0], 48))[0].tokens, want);
}

TEST_F(EngineDiskTest, TheDirectoryStaysUnderItsCap) {
  const int64_t cap = 64 * 1024;
  Engine e(*model_, tok_, {2}, disk_config(256, cap));
  for (const char* p : kPrompts) run_to_completion(e, greedy(p, 48));
  e.flush_disk();
  int64_t bytes = 0;
  for (const auto& f : entries()) bytes += static_cast<int64_t>(fs::file_size(f));
  EXPECT_LE(bytes, cap);
  EXPECT_GT(e.stats().disk.evictions, 0);
  EXPECT_EQ(e.stats().disk.bytes, bytes);
}

TEST_F(EngineDiskTest, ModelsWithoutAPrefixCacheKeepNothingOnDisk) {
  EngineConfig c = disk_config();
  c.prefix_caching = false;
  Engine e(*model_, tok_, {2}, c);
  run_to_completion(e, greedy(kPrompts[0], 48));
  EXPECT_FALSE(e.stats().kv_disk);
  EXPECT_TRUE(entries().empty());
}

}  // namespace
}  // namespace tf
