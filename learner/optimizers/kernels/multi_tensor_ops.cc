// Multi-tensor CPU kernels of tf-learner (issue 16): one op per learner step.
//
//   TfLearnerMultiSumSquares     half sum of squares of every tensor of a
//                                list, and the total, in one read pass.
//   TfLearnerMultiApplySGD       SGD's step                    (SGD)
//   TfLearnerMultiApplyMomentum  Momentum's step, f * g folded in  (Momentum)
//   TfLearnerMultiApplyAdam      TF's Adam step, f * g folded in (Adam/AdamW)
//   TfLearnerMultiAccumulate     acc += w * g if every g is finite
//                                (accumulation)
//   TfLearnerMultiZero           v = 0 in place                (window end)
//
// The apply ops are MultiApplyOp (multi_tensor_common.h) with a rule each:
// every one may subtract decoupled weight decay rate * w_old from the
// variables whose `decay` entry is true, in the same pass, and (attr
// measure_weights) outputs sum(w_old^2) / 2 over all its variables, the
// total TfLearnerMultiSumSquares would give (0 when not measured). A rule's
// Step below is the kernel's only statement of its formula.
//
// Bitwise compatibility: each elementwise expression is written in the
// order of operations of TF's own CPU functor (tensorflow/core/kernels/
// training_ops.cc: ApplyGradientDescent, ApplyMomentum, ApplyAdamNonCuda)
// and of the pure-TF path around it (scaled gradient, decay), and the file
// is compiled with -ffp-contract=off (no fused multiply-add), so both paths
// round identically. IEEE add, mul, div and sqrt are correctly rounded at any
// vector width.
//
// Work split: the elements of all tensors are cut into chunks of kChunk
// elements (a chunk never spans two tensors) and the chunks are spread over
// the calling thread and the intra-op pool (ForEachChunk, in
// multi_tensor_common.h). Every chunk is independent, so the result does not
// depend on the number of threads. A future pass (e.g. "skip the step if a
// new weight would be non-finite") fits as a first ForEachChunk over the same
// chunks that only reads, before the writing one (as
// TfLearnerMultiAccumulate does with its finite check).

#include <algorithm>
#include <cmath>
#include <vector>

#include "multi_tensor_common.h"

namespace tf_learner {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

// The chunks, the work split, the sum of squares and the apply skeleton are
// shared with multi_tensor_rules.cc (multi_tensor_common.h).
using common::Chunk;
using common::ForEachChunk;
using common::ForEachChunkReversed;
using common::LockedVariables;
using common::MakeChunks;
using common::MultiApplyOp;
using common::RuleBase;
using common::SameShapes;
using common::ScalarInputs;
using common::SumSquares;

std::vector<double> PerTensorHalves(const std::vector<Chunk>& chunks,
                                    const std::vector<double>& partial,
                                    int num_tensors);

// Per-tensor half sums of squares of `inputs` (float32 tensors), in double,
// combined in chunk order (deterministic).
std::vector<double> HalfSumSquares(OpKernelContext* ctx,
                                   const std::vector<const float*>& data,
                                   const std::vector<int64_t>& sizes) {
  const std::vector<Chunk> chunks = MakeChunks(sizes);
  std::vector<double> partial(chunks.size(), 0.0);
  ForEachChunk(ctx, chunks.size(), [&](int64_t c) {
    const Chunk& k = chunks[c];
    partial[c] = SumSquares(data[k.tensor] + k.begin, k.end - k.begin);
  });
  return PerTensorHalves(chunks, partial, sizes.size());
}

// Per-tensor halves of chunk sums (combined in chunk order), as
// HalfSumSquares returns them.
std::vector<double> PerTensorHalves(const std::vector<Chunk>& chunks,
                                    const std::vector<double>& partial,
                                    int num_tensors) {
  std::vector<double> half(num_tensors, 0.0);
  for (size_t c = 0; c < chunks.size(); ++c) {
    half[chunks[c].tensor] += partial[c];
  }
  for (double& h : half) h *= 0.5;
  return half;
}

// ---- TfLearnerMultiSumSquares ----------------------------------------------

class MultiSumSquaresOp : public OpKernel {
 public:
  explicit MultiSumSquaresOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const int n = ctx->num_inputs();
    std::vector<const float*> data(n);
    std::vector<int64_t> sizes(n);
    for (int i = 0; i < n; ++i) {
      data[i] = ctx->input(i).flat<float>().data();
      sizes[i] = ctx->input(i).NumElements();
    }
    const std::vector<double> half = HalfSumSquares(ctx, data, sizes);
    Tensor* per_tensor = nullptr;
    Tensor* total = nullptr;
    Tensor* finite = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, {n}, &per_tensor));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, {}, &total));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, {}, &finite));
    double sum = 0.0;
    for (int i = 0; i < n; ++i) {
      per_tensor->flat<float>()(i) = static_cast<float>(half[i]);
      sum += half[i];
    }
    const float sum_f = static_cast<float>(sum);
    total->scalar<float>()() = sum_f;
    finite->scalar<bool>()() = std::isfinite(sum_f);
  }
};

// ---- the apply rules --------------------------------------------------------
// Each is only its step; MultiApplyOp (multi_tensor_common.h) does the rest.
// A rule's constructor reads the scalar inputs in the order its registration
// (below) lists them.

// TfLearnerMultiApplySGD: SGD's step (learner/optimizers/base.py, SGD), in
// the order of TF's ApplyGradientDescent. alpha is lr with any gradient
// scale folded in by the caller (no scale_grad attr).
struct SGDRule : RuleBase {
  static constexpr int kSlots = 0;
  static constexpr bool kScaleGrad = false;

  explicit SGDRule(ScalarInputs* in) { in->Read(&alpha, &wd); }

  float Step(int64_t, float w, float g) const { return w - g * alpha; }

  float alpha = 0.f;
};

// TfLearnerMultiApplyMomentum: Momentum's step (learner/optimizers/rules/
// momentum.py), in the order of TF's ApplyMomentum; `flag` is the attr
// use_nesterov.
struct MomentumRule : RuleBase {
  static constexpr int kSlots = 1;
  static constexpr const char* kFlagAttr = "use_nesterov";
  static constexpr bool kHasFlag = true;

  explicit MomentumRule(ScalarInputs* in) { in->Read(&lr, &mom, &factor, &wd); }

  template <bool kNesterov, bool>
  float Step(int64_t i, float w, float g, float* a) const {
    const float ai = a[i] * mom + g;
    a[i] = ai;
    return kNesterov ? w - (g * lr + ai * mom * lr) : w - ai * lr;
  }

  float lr = 0.f, mom = 0.f;
};

// TfLearnerMultiApplyAdam: Adam's step (learner/optimizers/rules/adam.py,
// Adam and AdamW), in the order of TF's ApplyAdamNonCuda, which also folds
// the bias corrections into alpha and takes 1 - beta here.
struct AdamRule : RuleBase {
  static constexpr int kSlots = 2;

  explicit AdamRule(ScalarInputs* in) {
    float b1p, b2p, lr, b1, b2;
    in->Read(&b1p, &b2p, &lr, &b1, &b2, &eps, &factor, &wd);
    alpha = lr * std::sqrt(1.f - b2p) / (1.f - b1p);
    c1 = 1.f - b1;
    c2 = 1.f - b2;
  }

  float Step(int64_t i, float w, float g, float* m, float* v) const {
    const float mi = m[i] + (g - m[i]) * c1;
    const float vi = v[i] + (g * g - v[i]) * c2;
    m[i] = mi;
    v[i] = vi;
    return w - (mi * alpha) / (std::sqrt(vi) + eps);
  }

  float alpha = 0.f, c1 = 0.f, c2 = 0.f, eps = 0.f;
};

// ---- TfLearnerMultiAccumulate ----------------------------------------------
// Inputs: accs (N resources), grads (N), weight. Output: finite (bool).
// Pass 1 (reads g): finite = the float32 sum of squares of every g is
// finite, the same test as the pure-TF path (is_finite(add_n(l2_loss(g)))).
// Pass 2, only if finite: acc' = acc - g * (-weight), i.e. acc + g * weight
// exactly as TF's ResourceApplyGradientDescent with alpha = -weight; it runs
// over the chunks in reverse order, so it starts with the gradient chunks
// pass 1 left in cache (16 B/param from memory when g outgrows the cache,
// 12 B/param when it fits: the small set's 4 MB of g does).

// a[i] - g[i] * alpha, as ResourceApplyGradientDescent computes it.
void AddScaled(float* __restrict__ a, const float* __restrict__ g, float alpha,
               int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = a[i] - g[i] * alpha;
}

std::vector<int> FirstInputs(int n) {
  std::vector<int> out(n);
  for (int i = 0; i < n; ++i) out[i] = i;
  return out;
}

class MultiAccumulateOp : public OpKernel {
 public:
  explicit MultiAccumulateOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("N", &n_));
  }

  void Compute(OpKernelContext* ctx) override {
    LockedVariables accs(ctx, FirstInputs(n_));
    if (!ctx->status().ok()) return;
    if (!SameShapes(ctx, accs, 1, n_, n_, /*name_group=*/false)) return;
    std::vector<const float*> g(n_);
    std::vector<int64_t> sizes(n_);
    for (int i = 0; i < n_; ++i) {
      g[i] = ctx->input(n_ + i).flat<float>().data();
      sizes[i] = ctx->input(n_ + i).NumElements();
    }
    double sum = 0.0;
    for (double h : HalfSumSquares(ctx, g, sizes)) sum += h;
    const bool finite = std::isfinite(static_cast<float>(sum));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, {}, &out));
    out->scalar<bool>()() = finite;
    if (!finite) return;
    float weight = 0.f;
    ScalarInputs(ctx, 2 * n_).Read(&weight);
    const float alpha = -weight;
    const std::vector<Chunk> chunks = MakeChunks(sizes);
    // Reversed: pass 1 read g forward, so its tail is still in cache.
    ForEachChunkReversed(ctx, chunks.size(), [&](int64_t c) {
      const Chunk& k = chunks[c];
      AddScaled(accs.data(k.tensor) + k.begin, g[k.tensor] + k.begin, alpha,
                k.end - k.begin);
    });
  }

 private:
  int n_ = 0;
};

// ---- TfLearnerMultiZero ----------------------------------------------------
// Inputs: vars (N resources). Sets every element of every variable to +0 in
// place (an accumulation window's end): no new buffer per variable, where
// assign(fill(shape, 0)) allocates (and page-faults) a fresh one each time.

class MultiZeroOp : public OpKernel {
 public:
  explicit MultiZeroOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("N", &n_));
  }

  void Compute(OpKernelContext* ctx) override {
    LockedVariables vars(ctx, FirstInputs(n_));
    if (!ctx->status().ok()) return;
    std::vector<int64_t> sizes(n_);
    for (int i = 0; i < n_; ++i) sizes[i] = vars.tensor(i).NumElements();
    const std::vector<Chunk> chunks = MakeChunks(sizes);
    ForEachChunk(ctx, chunks.size(), [&](int64_t c) {
      const Chunk& k = chunks[c];
      std::fill(vars.data(k.tensor) + k.begin, vars.data(k.tensor) + k.end,
                0.f);
    });
  }

 private:
  int n_ = 0;
};

}  // namespace

// ---- registration -----------------------------------------------------------

using ::tensorflow::shape_inference::InferenceContext;

REGISTER_OP("TfLearnerMultiSumSquares")
    .Input("tensors: N * float")
    .Output("half_sum_squares: float")
    .Output("total: float")
    .Output("finite: bool")
    .Attr("N: int >= 1")
    .SetShapeFn([](InferenceContext* c) {
      int n;
      TF_RETURN_IF_ERROR(c->GetAttr("N", &n));
      c->set_output(0, c->Vector(n));
      c->set_output(1, c->Scalar());
      c->set_output(2, c->Scalar());
      return absl::OkStatus();
    });

REGISTER_OP("TfLearnerMultiApplySGD")
    .Input("vars: N * resource")
    .Input("grads: N * float")
    .Input("alpha: float")
    .Input("wd_rate: float")
    .Attr("N: int >= 1")
    .Output("weights_half_sum_squares: float")
    .Attr("decay: list(bool)")
    .Attr("measure_weights: bool = false")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape);

REGISTER_OP("TfLearnerMultiApplyMomentum")
    .Input("vars: N * resource")
    .Input("accums: N * resource")
    .Input("grads: N * float")
    .Input("lr: float")
    .Input("momentum: float")
    .Input("grad_factor: float")
    .Input("wd_rate: float")
    .Attr("N: int >= 1")
    .Output("weights_half_sum_squares: float")
    .Attr("decay: list(bool)")
    .Attr("measure_weights: bool = false")
    .Attr("use_nesterov: bool = false")
    .Attr("scale_grad: bool = false")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape);

REGISTER_OP("TfLearnerMultiApplyAdam")
    .Input("vars: N * resource")
    .Input("ms: N * resource")
    .Input("vs: N * resource")
    .Input("grads: N * float")
    .Input("beta1_power: float")
    .Input("beta2_power: float")
    .Input("lr: float")
    .Input("beta1: float")
    .Input("beta2: float")
    .Input("epsilon: float")
    .Input("grad_factor: float")
    .Input("wd_rate: float")
    .Attr("N: int >= 1")
    .Output("weights_half_sum_squares: float")
    .Attr("decay: list(bool)")
    .Attr("measure_weights: bool = false")
    .Attr("scale_grad: bool = false")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape);

REGISTER_OP("TfLearnerMultiAccumulate")
    .Input("accs: N * resource")
    .Input("grads: N * float")
    .Input("weight: float")
    .Output("finite: bool")
    .Attr("N: int >= 1")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return absl::OkStatus();
    });

REGISTER_OP("TfLearnerMultiZero")
    .Input("vars: N * resource")
    .Attr("N: int >= 1")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs);

REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiZero").Device(::tensorflow::DEVICE_CPU), MultiZeroOp);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiSumSquares").Device(::tensorflow::DEVICE_CPU),
    MultiSumSquaresOp);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplySGD").Device(::tensorflow::DEVICE_CPU),
    MultiApplyOp<SGDRule>);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplyMomentum").Device(::tensorflow::DEVICE_CPU),
    MultiApplyOp<MomentumRule>);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplyAdam").Device(::tensorflow::DEVICE_CPU),
    MultiApplyOp<AdamRule>);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiAccumulate").Device(::tensorflow::DEVICE_CPU),
    MultiAccumulateOp);

}  // namespace tf_learner
