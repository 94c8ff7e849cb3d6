// replayalloc as libtorch's CPU allocator: outputs bit-identical with and without
// replay on four model families, op tags on a model whose allocations we can
// predict, and threads each replaying the same module on a slab of their own.
// Random weights, fixed seeds; the models are built with the C++ frontend.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "replayalloc/torch.hpp"
#include "trace/trace_io.h"

namespace {

namespace nn = torch::nn;

struct BlockImpl : nn::Module {
  explicit BlockImpl(int c)
      : c1(register_module("c1", nn::Conv2d(nn::Conv2dOptions(c, c, 3).padding(1).bias(false)))),
        b1(register_module("b1", nn::BatchNorm2d(c))),
        c2(register_module("c2", nn::Conv2d(nn::Conv2dOptions(c, c, 3).padding(1).bias(false)))),
        b2(register_module("b2", nn::BatchNorm2d(c))) {}
  torch::Tensor forward(torch::Tensor x) {
    auto y = torch::relu(b1(c1(x)));
    return torch::relu(b2(c2(y)) + x);  // the residual keeps x alive across the block
  }
  nn::Conv2d c1, c2;
  nn::BatchNorm2d b1, b2;
};
TORCH_MODULE(Block);

struct ResNetLike : nn::Module {
  ResNetLike()
      : stem(register_module("stem", nn::Conv2d(nn::Conv2dOptions(3, 16, 3).padding(1)))),
        b1(register_module("b1", Block(16))),
        b2(register_module("b2", Block(16))),
        fc(register_module("fc", nn::Linear(16, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = b2(b1(torch::relu(stem(x))));
    return fc(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
  }
  nn::Conv2d stem;
  Block b1, b2;
  nn::Linear fc;
};

struct MobileNetLike : nn::Module {
  MobileNetLike()
      : stem(register_module("stem", nn::Conv2d(nn::Conv2dOptions(3, 16, 3).stride(2).padding(1)))),
        dw(register_module("dw", nn::Conv2d(nn::Conv2dOptions(16, 16, 3).padding(1).groups(16)))),
        pw(register_module("pw", nn::Conv2d(nn::Conv2dOptions(16, 32, 1)))),
        bn(register_module("bn", nn::BatchNorm2d(32))),
        fc(register_module("fc", nn::Linear(32, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::hardtanh(stem(x), 0, 6);
    x = torch::hardtanh(bn(pw(torch::hardtanh(dw(x), 0, 6))), 0, 6);
    return fc(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
  }
  nn::Conv2d stem, dw, pw;
  nn::BatchNorm2d bn;
  nn::Linear fc;
};

struct EncoderLike : nn::Module {
  EncoderLike()
      : enc(register_module("enc", nn::TransformerEncoder(
                                       nn::TransformerEncoderLayer(nn::TransformerEncoderLayerOptions(64, 4)
                                                                       .dim_feedforward(128)
                                                                       .dropout(0.0)),
                                       2))) {}
  torch::Tensor forward(torch::Tensor x) { return enc(x); }
  nn::TransformerEncoder enc;
};

struct LstmLike : nn::Module {
  LstmLike() : lstm(register_module("lstm", nn::LSTM(nn::LSTMOptions(32, 64).num_layers(2)))) {}
  torch::Tensor forward(torch::Tensor x) { return std::get<0>(lstm(x)); }
  nn::LSTM lstm;
};

struct model_case {
  std::string name;
  std::function<torch::Tensor(torch::Tensor)> run;
  torch::Tensor input;
  torch::Tensor reference;  // computed with libtorch's own allocator
};

std::vector<model_case>& cases() {
  static std::vector<model_case> all = [] {
    std::vector<model_case> v;
    torch::manual_seed(0);
    auto resnet = std::make_shared<ResNetLike>();
    auto mobile = std::make_shared<MobileNetLike>();
    auto encoder = std::make_shared<EncoderLike>();
    auto lstm = std::make_shared<LstmLike>();
    for (nn::Module* m : std::initializer_list<nn::Module*>{resnet.get(), mobile.get(), encoder.get(), lstm.get()}) {
      m->eval();
    }
    v.push_back({"resnet", [resnet](torch::Tensor x) { return resnet->forward(x); }, torch::randn({2, 3, 32, 32}), {}});
    v.push_back({"mobilenet", [mobile](torch::Tensor x) { return mobile->forward(x); }, torch::randn({2, 3, 32, 32}), {}});
    v.push_back({"encoder", [encoder](torch::Tensor x) { return encoder->forward(x); }, torch::randn({16, 2, 64}), {}});
    v.push_back({"lstm", [lstm](torch::Tensor x) { return lstm->forward(x); }, torch::randn({10, 2, 32}), {}});
    torch::NoGradGuard no_grad;
    for (model_case& c : v) c.reference = c.run(c.input).clone();
    return v;
  }();
  return all;
}

// Training steps (issue 16): a small CNN (conv, batch norm, ReLU, linear) trained with
// SGD with momentum and cross-entropy, 20 steps from a fixed seed on fixed data, one
// iteration per step. Gradients are zeroed in place, set to None (reset), or the two
// alternately (two structures under one key: Note [Regimes]). Returns every parameter
// and buffer after every step; with `planned`, the share of the planned requests of
// steps `from`..19 served from the slab.
struct TrainNetImpl : nn::Module {
  TrainNetImpl()
      : conv(register_module("conv", nn::Conv2d(nn::Conv2dOptions(3, 8, 3).padding(1)))),
        bn(register_module("bn", nn::BatchNorm2d(8))),
        fc(register_module("fc", nn::Linear(8 * 16 * 16, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    auto y = torch::relu(bn(conv(x)));
    return fc(torch::max_pool2d(y, 2).flatten(1));
  }
  nn::Conv2d conv;
  nn::BatchNorm2d bn;
  nn::Linear fc;
};
TORCH_MODULE(TrainNet);

enum class zero_grads { in_place, to_none, alternating };

std::vector<std::vector<torch::Tensor>> train(zero_grads how, const std::string& key, int from = 0,
                                              double* planned = nullptr) {
  torch::manual_seed(7);
  TrainNet net;
  net->train();
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  const torch::Tensor x = torch::randn({4, 3, 32, 32});
  const torch::Tensor labels = torch::tensor({1, 3, 5, 7}, torch::kLong);
  std::vector<std::vector<torch::Tensor>> after_step;
  replayalloc::Stats start;
  for (int step = 0; step < 20; ++step) {
    if (step == from) start = replayalloc::stats();
    {
      std::optional<replayalloc::torch::Iteration> it;
      if (!key.empty()) it.emplace(key);
      torch::Tensor loss = torch::nn::functional::cross_entropy(net->forward(x), labels);
      loss.backward();
      opt.step();
      const bool to_none = how == zero_grads::to_none || (how == zero_grads::alternating && step % 2 == 1);
      for (torch::Tensor& p : net->parameters()) {
        if (!p.grad().defined()) continue;
        if (to_none) {
          p.mutable_grad().reset();
        } else {
          p.mutable_grad().detach_();
          p.mutable_grad().zero_();
        }
      }
    }
    std::vector<torch::Tensor> state;
    for (const torch::Tensor& p : net->parameters()) state.push_back(p.detach().clone());
    for (const torch::Tensor& b : net->buffers()) state.push_back(b.detach().clone());
    after_step.push_back(std::move(state));
  }
  if (planned != nullptr) {
    const replayalloc::Stats end = replayalloc::stats();
    const double hits = static_cast<double>(end.slab_hits - start.slab_hits);
    const double misses = static_cast<double>(end.fallbacks - start.fallbacks);
    *planned = hits / std::max(1.0, hits + misses);
  }
  return after_step;
}

const std::map<zero_grads, std::vector<std::vector<torch::Tensor>>>& training_references() {
  static const auto refs = [] {
    std::map<zero_grads, std::vector<std::vector<torch::Tensor>>> r;
    for (zero_grads how : {zero_grads::in_place, zero_grads::to_none, zero_grads::alternating}) r[how] = train(how, "");
    return r;
  }();
  return refs;
}

class TorchCpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cases();  // references first, with libtorch's own allocator
    training_references();
    replayalloc::torch::install();
  }
};

TEST_F(TorchCpu, OutputsAreBitIdenticalWithAndWithoutReplay) {
  torch::NoGradGuard no_grad;
  for (model_case& c : cases()) {
    const replayalloc::Stats before = replayalloc::stats();
    replayalloc::Stats warm;
    for (int i = 0; i < 8; ++i) {
      if (i == 3) warm = replayalloc::stats();
      torch::Tensor y;
      {
        replayalloc::torch::Iteration it("test/" + c.name);
        y = c.run(c.input);
      }
      ASSERT_TRUE(torch::equal(y, c.reference)) << c.name << " iteration " << i;
    }
    const replayalloc::Stats after = replayalloc::stats();
    EXPECT_EQ(after.plans - before.plans, 1u) << c.name;
    EXPECT_GT(after.slab_hits - warm.slab_hits, 0u) << c.name;
    EXPECT_EQ(after.fallbacks - warm.fallbacks, 0u) << c.name << ": the steady state should replay";
  }
}

// Shapes that change (Note [Envelope]): the encoder at a random sequence length per
// request (16..256), one key, through libtorch's C++ frontend. Outputs are
// bit-identical to libtorch's own allocator at every length, and once the largest
// length has been seen at least 95% of the requests the plan expects come from the slab.
TEST_F(TorchCpu, AVariableSequenceLengthReplaysFromOnePlan) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  auto encoder = std::make_shared<EncoderLike>();
  encoder->eval();
  std::mt19937 rng(5);
  std::vector<std::int64_t> lengths = {256, 16};
  for (int i = 0; i < 38; ++i) lengths.push_back(16 + static_cast<std::int64_t>(rng() % 241));
  std::map<std::int64_t, torch::Tensor> inputs, reference;
  for (std::int64_t t : lengths) {
    if (inputs.count(t) == 0) inputs[t] = torch::randn({t, 2, 64});
  }
  replayalloc::torch::uninstall();
  for (auto& [t, x] : inputs) reference[t] = encoder->forward(x).clone();
  replayalloc::torch::install();
  replayalloc::Stats steady;
  const replayalloc::Stats before = replayalloc::stats();
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (i == 4) steady = replayalloc::stats();
    torch::Tensor y;
    {
      replayalloc::torch::Iteration it("test/encoder-varlen");
      y = encoder->forward(inputs[lengths[i]]);
    }
    ASSERT_TRUE(torch::equal(y, reference[lengths[i]])) << "length " << lengths[i] << ", request " << i;
  }
  const replayalloc::Stats after = replayalloc::stats();
  const double hits = static_cast<double>(after.slab_hits - steady.slab_hits);
  const double misses = static_cast<double>(after.fallbacks - steady.fallbacks);
  std::printf("encoder, sequence length 16..256, C++: %.1f%% of %.0f planned requests from the slab; "
              "%llu plans\n", 100.0 * hits / (hits + misses), hits + misses,
              static_cast<unsigned long long>(after.plans - before.plans));
  EXPECT_GE(hits / (hits + misses), 0.95);
  EXPECT_LE(after.plans - before.plans, 3u);
}

TEST_F(TorchCpu, AllocationsAreTaggedWithTheOpThatMadeThem) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(1);
  nn::Linear linear(8, 16);
  torch::Tensor x = torch::randn({4, 8});
  {
    replayalloc::torch::Iteration it("test/ops");
    torch::Tensor y = torch::relu(linear(x));
    torch::Tensor z = torch::cat({y, y}, 1);
    c10::DataPtr raw = c10::GetCPUAllocator()->allocate(4096);  // outside any op
    ASSERT_EQ(z.size(1), 32);
  }
  const std::string path = ::testing::TempDir() + "/ops.csv";
  ASSERT_EQ(replayalloc_save_trace("test/ops", path.c_str()), 0);
  absl::StatusOr<replayalloc::trace> t = replayalloc::read_trace_file(path);
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<std::string> ops;
  for (const auto& a : t->allocations) ops.push_back(t->ops[a.op]);
  // Tags name the innermost op: linear's output is made inside aten::addmm, relu's
  // inside aten::clamp_min (libtorch 1.13 implements relu with it), cat's by itself;
  // the raw allocation outside any op.
  EXPECT_THAT(ops, ::testing::Contains(::testing::AnyOf("aten::addmm", "aten::linear", "aten::mm")));
  EXPECT_THAT(ops, ::testing::Contains(::testing::AnyOf("aten::relu", "aten::clamp_min")));
  EXPECT_THAT(ops, ::testing::Contains("aten::cat"));
  EXPECT_THAT(ops, ::testing::Contains(replayalloc::torch::outside_ops));
  // Sizes: relu's output 4x16 floats, cat's 4x32 floats.
  bool relu_ok = false, cat_ok = false;
  for (const auto& a : t->allocations) {
    relu_ok |= (t->ops[a.op] == "aten::relu" || t->ops[a.op] == "aten::clamp_min") &&
               a.size == 4 * 16 * sizeof(float);
    cat_ok |= t->ops[a.op] == "aten::cat" && a.size == 4 * 32 * sizeof(float);
  }
  EXPECT_TRUE(relu_ok);
  EXPECT_TRUE(cat_ok);
}

TEST_F(TorchCpu, ThreadsReplayASharedModuleEachOnTheirOwnSlab) {
  model_case& c = cases()[0];
  const replayalloc::Stats before = replayalloc::stats();
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      torch::NoGradGuard no_grad;
      for (int i = 0; i < 12; ++i) {
        torch::Tensor y;
        {
          replayalloc::torch::Iteration it("test/threads");
          y = c.run(c.input);
        }
        if (!torch::equal(y, c.reference)) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  const replayalloc::Stats after = replayalloc::stats();
  EXPECT_GT(after.slab_hits - before.slab_hits, 0u);
  EXPECT_EQ(after.double_frees - before.double_frees, 0u);
  EXPECT_EQ(after.invalid_frees - before.invalid_frees, 0u);
}

// Every parameter and buffer bit-identical to libtorch's own allocator after every
// step; from step 5 (step 10 when the steps alternate between two structures, the
// second found by a probe) at least 90% of the planned requests from the slab.
TEST_F(TorchCpu, TrainingStepsReplayWithParametersBitIdentical) {
  const std::pair<zero_grads, const char*> runs[] = {
      {zero_grads::in_place, "in place"}, {zero_grads::to_none, "set to none"}, {zero_grads::alternating, "alternating"}};
  for (const auto& [how, name] : runs) {
    const int from = how == zero_grads::alternating ? 10 : 5;
    double planned = 0;
    const auto got = train(how, std::string("test/train/") + name, from, &planned);
    const auto& want = training_references().at(how);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t step = 0; step < got.size(); ++step) {
      for (std::size_t k = 0; k < got[step].size(); ++k) {
        ASSERT_TRUE(torch::equal(got[step][k], want[step][k])) << name << ": step " << step << ", tensor " << k;
      }
    }
    std::printf("CNN, SGD with momentum, gradients zeroed %s: %.1f%% of the planned requests of steps %d..19 "
                "from the slab\n", name, 100.0 * planned, from);
    EXPECT_GE(planned, 0.90) << name;
  }
}

TEST_F(TorchCpu, UninstallRestoresLibtorchsAllocatorAndTensorsStayValid) {
  torch::NoGradGuard no_grad;
  torch::Tensor kept;
  {
    replayalloc::torch::Iteration it("test/uninstall");
    kept = torch::ones({256});
  }
  replayalloc::torch::uninstall();
  EXPECT_FALSE(replayalloc::torch::installed());
  torch::Tensor after = torch::ones({256});
  EXPECT_TRUE(torch::equal(kept, after));
  kept = torch::Tensor();  // freed through replayalloc's deleter, after uninstall
  replayalloc::torch::install();
  EXPECT_TRUE(replayalloc::torch::installed());
}

}  // namespace
