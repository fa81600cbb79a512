// TF weight names as transformers' convert_tf_weight_name_to_pt_weight_name gives them (the
// files themselves: tests/reference/test_tf_weights.py), and the child-process isolation of
// libhdf5: a file it cannot read is an Error naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/tf_weights.h"

namespace tf {
namespace {

TEST(TfWeights, NamesAsTransformersConvertsThem) {
  auto check = [](const char* tf_name, const char* pt, bool transpose) {
    const PtName n = tf_to_pt_name(tf_name);
    EXPECT_EQ(n.name, pt) << tf_name;
    EXPECT_EQ(n.transpose, transpose) << tf_name;
  };
  check("tfgp_t2lm_head_model/transformer/h_._11/attn/c_attn/weight:0",
        "transformer.h.11.attn.c_attn.weight", false);
  check("tfgp_t2lm_head_model/transformer/wpe/embeddings:0", "transformer.wpe.weight", false);
  check("tfgp_t2lm_head_model/transformer/ln_f/gamma:0", "transformer.ln_f.weight", false);
  check("tfgp_t2lm_head_model/transformer/h_._0/ln_1/beta:0", "transformer.h.0.ln_1.bias", false);
  check("tf_mistral_for_causal_lm/model/layers.3/self_attn/q_proj/kernel:0",
        "model.layers.3.self_attn.q_proj.weight", true);
  check("tf_mistral_for_causal_lm/lm_head/kernel:0", "lm_head.weight", true);
  check("tf_bert_model/bert/encoder/layer_._0/attention/self___query/kernel:0",
        "bert.encoder.layer.0.attention.query.weight", true);  // '$1___$2' is $2
}

TEST(TfWeights, AFileLibhdf5CannotReadIsAnErrorNamingIt) {
  const auto path = std::filesystem::temp_directory_path() / "tf_weights_test_not.h5";
  std::ofstream(path) << "not an HDF5 file";
  WeightStore store;
  try {
    load_tf_h5_file(path.string(), store);
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tf_weights_test_not.h5"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
  EXPECT_EQ(store.size(), 0u);
}

}  // namespace
}  // namespace tf
