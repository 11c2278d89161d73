// Multi-tensor CPU kernels of tf-learner (issue 16): one op per learner step.
//
//   TfLearnerMultiSumSquares   half sum of squares of every tensor of a list,
//                              and the total, in one read pass.
//   TfLearnerMultiApplySGD     w -= alpha * g                        (SGD)
//   TfLearnerMultiApplyMomentum  a = mom * a + f * g; w -= lr * a     (Momentum)
//   TfLearnerMultiApplyAdam    TF's Adam update, f * g folded in      (Adam/AdamW)
//   TfLearnerMultiAccumulate   acc += w * g if every g is finite      (accumulation)
//   TfLearnerMultiZero         v = 0 in place                       (window end)
//
// Every apply op may subtract decoupled weight decay rate * w_old from the
// variables whose `decay` entry is true, in the same pass, and (attr
// measure_weights) outputs sum(w_old^2) / 2 over all its variables, the
// total TfLearnerMultiSumSquares would give (0 when not measured).
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
// the calling thread and the intra-op pool (ForEachChunk). Every chunk is
// independent, so the result does not depend on the number of threads. A
// future pass (e.g. "skip the step if a new weight would be non-finite")
// fits as a first ForEachChunk over the same chunks that only reads, before
// the writing one (as TfLearnerMultiAccumulate does with its finite check).

#define EIGEN_USE_THREADS

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/kernels/training_op_helpers.h"
#include "tensorflow/core/platform/threadpool.h"
#include "multi_tensor_common.h"

namespace tf_learner {
namespace {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using CPUDevice = Eigen::ThreadPoolDevice;

// The chunks, the work split, the sum of squares and the apply base are
// shared with multi_tensor_rules.cc (multi_tensor_common.h).
using common::Chunk;
using common::CombineHalves;
using common::ForEachChunk;
using common::ForEachChunkReversed;
using common::kChunk;
using common::LockedVariables;
using common::MakeChunks;
using common::MultiApplyBase;
using common::Scalar;
using common::SumSquares;
using common::WithFlags;

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

// ---- variables ------------------------------------------------------------

std::vector<int> Range(int first, int count) {
  std::vector<int> out(count);
  for (int i = 0; i < count; ++i) out[i] = first + i;
  return out;
}

// Checks that every variable group and the gradients have the same shapes.
bool CheckShapes(OpKernelContext* ctx, const std::vector<LockedVariables*>& vs,
                 int grads_first, int n) {
  for (int i = 0; i < n; ++i) {
    const Tensor& g = ctx->input(grads_first + i);
    for (LockedVariables* v : vs) {
      if (!v->tensor(i).shape().IsSameSize(g.shape())) {
        ctx->CtxFailure(tensorflow::errors::InvalidArgument(
            "tensor ", i, ": variable shape ",
            v->tensor(i).shape().DebugString(), " != gradient shape ",
            g.shape().DebugString()));
        return false;
      }
    }
  }
  return ctx->status().ok();
}

std::vector<int64_t> Sizes(OpKernelContext* ctx, int first, int n) {
  std::vector<int64_t> sizes(n);
  for (int i = 0; i < n; ++i) sizes[i] = ctx->input(first + i).NumElements();
  return sizes;
}

// ---- TfLearnerMultiApplySGD ------------------------------------------------
// Inputs: vars, grads, alpha, wd_rate.
// w' = w - g * alpha; with decay: w' - wd_rate * w.

class MultiApplySGDOp : public MultiApplyBase {
 public:
  explicit MultiApplySGDOp(OpKernelConstruction* ctx)
      : MultiApplyBase(ctx, 0, /*has_scale_grad=*/false) {}

 protected:
  void Prepare(OpKernelContext* ctx) override {
    alpha_ = Scalar(ctx, scalars_first());
    wd_ = Scalar(ctx, scalars_first() + 1);
  }
  void Update(float* w, float* const* slots, const float* g, int64_t n,
              bool decay) const override {
    WithFlags([&](auto d) { Run<decltype(d)::value>(w, g, n); }, decay);
  }

 private:
  template <bool kDecay>
  void Run(float* __restrict__ w, const float* __restrict__ g,
           int64_t n) const {
    const float alpha = alpha_, wd = wd_;
    for (int64_t i = 0; i < n; ++i) {
      const float w0 = w[i];
      w[i] = kDecay ? (w0 - g[i] * alpha) - wd * w0 : w0 - g[i] * alpha;
    }
  }

 private:
  float alpha_ = 0.f, wd_ = 0.f;
};

// ---- TfLearnerMultiApplyMomentum -------------------------------------------
// Inputs: vars, accums, grads, lr, momentum, grad_factor, wd_rate.
// Attrs: use_nesterov, scale_grad (multiply g by grad_factor first).
// a' = a * momentum + g;  w' = w - a' * lr
// (Nesterov: w' = w - (g * lr + a' * momentum * lr)); decay as SGD.

class MultiApplyMomentumOp : public MultiApplyBase {
 public:
  explicit MultiApplyMomentumOp(OpKernelConstruction* ctx)
      : MultiApplyBase(ctx, 1, /*has_scale_grad=*/true) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("use_nesterov", &nesterov_));
  }

 protected:
  void Prepare(OpKernelContext* ctx) override {
    lr_ = Scalar(ctx, scalars_first());
    mom_ = Scalar(ctx, scalars_first() + 1);
    factor_ = Scalar(ctx, scalars_first() + 2);
    wd_ = Scalar(ctx, scalars_first() + 3);
  }
  void Update(float* w, float* const* slots, const float* g, int64_t n,
              bool decay) const override {
    // Every flag is a template argument: each loop is branch-free.
    WithFlags(
        [&](auto s, auto nv, auto d) {
          Run<decltype(s)::value, decltype(nv)::value, decltype(d)::value>(
              w, slots[0], g, n);
        },
        scale_grad(), nesterov_, decay);
  }

 private:
  template <bool kScale, bool kNesterov, bool kDecay>
  void Run(float* __restrict__ w, float* __restrict__ a,
           const float* __restrict__ g, int64_t n) const {
    const float lr = lr_, mom = mom_, f = factor_, wd = wd_;
    for (int64_t i = 0; i < n; ++i) {
      const float gi = kScale ? g[i] * f : g[i];
      const float ai = a[i] * mom + gi;
      a[i] = ai;
      const float w0 = w[i];
      float w1 = kNesterov ? w0 - (gi * lr + ai * mom * lr) : w0 - ai * lr;
      if (kDecay) w1 = w1 - wd * w0;
      w[i] = w1;
    }
  }

  bool nesterov_ = false;
  float lr_ = 0.f, mom_ = 0.f, factor_ = 1.f, wd_ = 0.f;
};

// ---- TfLearnerMultiApplyAdam -----------------------------------------------
// Inputs: vars, ms, vs, grads, beta1_power, beta2_power, lr, beta1, beta2,
// epsilon, grad_factor, wd_rate. Attr scale_grad.
// alpha = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
// m' = m + (g - m) * (1 - beta1);  v' = v + (g * g - v) * (1 - beta2)
// w' = w - (m' * alpha) / (sqrt(v') + epsilon); decay as SGD.

class MultiApplyAdamOp : public MultiApplyBase {
 public:
  explicit MultiApplyAdamOp(OpKernelConstruction* ctx)
      : MultiApplyBase(ctx, 2, /*has_scale_grad=*/true) {}

 protected:
  void Prepare(OpKernelContext* ctx) override {
    const int s = scalars_first();
    const float b1p = Scalar(ctx, s), b2p = Scalar(ctx, s + 1);
    const float lr = Scalar(ctx, s + 2);
    alpha_ = lr * std::sqrt(1.f - b2p) / (1.f - b1p);
    one_minus_b1_ = 1.f - Scalar(ctx, s + 3);
    one_minus_b2_ = 1.f - Scalar(ctx, s + 4);
    eps_ = Scalar(ctx, s + 5);
    factor_ = Scalar(ctx, s + 6);
    wd_ = Scalar(ctx, s + 7);
  }
  void Update(float* w, float* const* slots, const float* g, int64_t n,
              bool decay) const override {
    // Every flag is a template argument: each loop is branch-free.
    WithFlags(
        [&](auto s, auto d) {
          Run<decltype(s)::value, decltype(d)::value>(w, slots[0], slots[1],
                                                      g, n);
        },
        scale_grad(), decay);
  }

 private:
  template <bool kScale, bool kDecay>
  void Run(float* __restrict__ w, float* __restrict__ m,
           float* __restrict__ v, const float* __restrict__ g,
           int64_t n) const {
    const float alpha = alpha_, c1 = one_minus_b1_, c2 = one_minus_b2_;
    const float eps = eps_, f = factor_, wd = wd_;
    for (int64_t i = 0; i < n; ++i) {
      const float gi = kScale ? g[i] * f : g[i];
      const float mi = m[i] + (gi - m[i]) * c1;
      const float vi = v[i] + (gi * gi - v[i]) * c2;
      m[i] = mi;
      v[i] = vi;
      const float w0 = w[i];
      float w1 = w0 - (mi * alpha) / (std::sqrt(vi) + eps);
      if (kDecay) w1 = w1 - wd * w0;
      w[i] = w1;
    }
  }

  float alpha_ = 0.f, one_minus_b1_ = 0.f, one_minus_b2_ = 0.f, eps_ = 0.f;
  float factor_ = 1.f, wd_ = 0.f;
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

class MultiAccumulateOp : public OpKernel {
 public:
  explicit MultiAccumulateOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("N", &n_));
  }

  void Compute(OpKernelContext* ctx) override {
    LockedVariables accs(ctx, Range(0, n_));
    if (!ctx->status().ok()) return;
    if (!CheckShapes(ctx, {&accs}, n_, n_)) return;
    std::vector<const float*> g(n_);
    for (int i = 0; i < n_; ++i) g[i] = ctx->input(n_ + i).flat<float>().data();
    const std::vector<int64_t> sizes = Sizes(ctx, n_, n_);
    double sum = 0.0;
    for (double h : HalfSumSquares(ctx, g, sizes)) sum += h;
    const bool finite = std::isfinite(static_cast<float>(sum));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, {}, &out));
    out->scalar<bool>()() = finite;
    if (!finite) return;
    const float alpha = -Scalar(ctx, 2 * n_);
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
    LockedVariables vars(ctx, Range(0, n_));
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
    MultiApplySGDOp);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplyMomentum").Device(::tensorflow::DEVICE_CPU),
    MultiApplyMomentumOp);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplyAdam").Device(::tensorflow::DEVICE_CPU),
    MultiApplyAdamOp);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiAccumulate").Device(::tensorflow::DEVICE_CPU),
    MultiAccumulateOp);

}  // namespace tf_learner
