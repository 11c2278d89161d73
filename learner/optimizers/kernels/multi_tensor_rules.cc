// Multi-tensor CPU kernels of the newer update rules (issue 27, item 5): one
// op per step for the memory-bound elementwise rules.
//
//   TfLearnerMultiApplyLion     Lion (Chen et al. 2023)        slot m
//   TfLearnerMultiApplyNadam    Nadam in optax's / Keras's form  slots m, v
//   TfLearnerMultiApplyAMSGrad  AMSGrad in optax's form          slots m, v, v_max
//   TfLearnerMultiApplyScheduleFreeSGD    schedule-free SGD     slots z, x
//   TfLearnerMultiApplyScheduleFreeAdamW  schedule-free AdamW   slots z, x, v
//
// (AdamW with epsilon_form='optax' needs no op of its own: it is the TF form
// with epsilon hat = epsilon sqrt(1 - beta2^t), so TfLearnerMultiApplyAdam of
// multi_tensor_ops.cc runs it.)
//
// As in multi_tensor_ops.cc: every op may fold a gradient factor f (attr
// scale_grad: g <- g * f first), subtracts decoupled weight decay
// wd_rate * w_old from the variables whose `decay` entry is true, and with
// measure_weights outputs sum(w_old^2) / 2 of all its variables. Every
// scalar that the pure-TF path computes outside the elementwise part (bias
// corrections in float64, 1 - beta, the momentum schedule) is computed by
// the same TF ops in Python and passed in, so the loops below only repeat
// the pure-TF path's elementwise expressions, in its order of operations;
// with -ffp-contract=off (no fused multiply-add) both paths round alike:
// the tests compare them bit for bit (tests/test_learner/test_rule_kernels.py).
// A division by a correction of exactly 1 (AMSGrad without bias correction)
// is exact, so one loop serves both settings.

#include "multi_tensor_common.h"

namespace tf_learner {
namespace {

using common::MultiApplyBase;
using common::Scalar;
using common::WithFlags;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;

// TF's Sign on floats: -1 or 1, +0 for either zero, NaN for NaN (checked
// against tf.sign). Selects only, no branch, so the loops vectorize.
inline float Sign(float x) {
  const float s = x > 0.f ? 1.f : (x < 0.f ? -1.f : 0.f);
  return x != x ? x : s;
}

// TF's Maximum on floats: NaN if either input is NaN (checked against
// tf.maximum). `a < b` is false when a is NaN, so a NaN a is kept.
inline float MaxNaN(float a, float b) {
  const float m = a < b ? b : a;
  return b != b ? b : m;
}

// ---- TfLearnerMultiApplyLion -----------------------------------------------
// Inputs: vars, ms, grads, lr, beta1, one_minus_beta1, beta2,
// one_minus_beta2, grad_factor, wd_rate.
// c = beta1 * m + (1 - beta1) * g;  w' = w - lr * sign(c)
// m' = beta2 * m + (1 - beta2) * g;  decay: w' - wd_rate * w.

class MultiApplyLionOp : public MultiApplyBase {
 public:
  explicit MultiApplyLionOp(OpKernelConstruction* ctx)
      : MultiApplyBase(ctx, 1, /*has_scale_grad=*/true) {}

 protected:
  void Prepare(OpKernelContext* ctx) override {
    const int s = scalars_first();
    lr_ = Scalar(ctx, s);
    b1_ = Scalar(ctx, s + 1);
    c1_ = Scalar(ctx, s + 2);
    b2_ = Scalar(ctx, s + 3);
    c2_ = Scalar(ctx, s + 4);
    factor_ = Scalar(ctx, s + 5);
    wd_ = Scalar(ctx, s + 6);
  }
  void Update(float* w, float* const* slots, const float* g, int64_t n,
              bool decay) const override {
    WithFlags(
        [&](auto s, auto d) {
          Run<decltype(s)::value, decltype(d)::value>(w, slots[0], g, n);
        },
        scale_grad(), decay);
  }

 private:
  template <bool kScale, bool kDecay>
  void Run(float* __restrict__ w, float* __restrict__ m,
           const float* __restrict__ g, int64_t n) const {
    const float lr = lr_, b1 = b1_, c1 = c1_, b2 = b2_, c2 = c2_;
    const float f = factor_, wd = wd_;
    for (int64_t i = 0; i < n; ++i) {
      const float gi = kScale ? g[i] * f : g[i];
      const float mi = m[i];
      const float c = b1 * mi + c1 * gi;
      const float w0 = w[i];
      float w1 = w0 - lr * Sign(c);
      if (kDecay) w1 = w1 - wd * w0;
      w[i] = w1;
      m[i] = b2 * mi + c2 * gi;
    }
  }

  float lr_ = 0.f, b1_ = 0.f, c1_ = 0.f, b2_ = 0.f, c2_ = 0.f;
  float factor_ = 1.f, wd_ = 0.f;
};

// ---- TfLearnerMultiApplyNadam ----------------------------------------------
// Inputs: vars, ms, vs, grads, lr, beta1, one_minus_beta1, beta2,
// one_minus_beta2, u_next, one_minus_p_next, one_minus_u, one_minus_p,
// one_minus_beta2_power, epsilon, grad_factor, wd_rate.
// m' = (1 - b1) g + b1 m;  v' = (1 - b2) g^2 + b2 v
// m_hat = u_next (m' / (1 - P_next)) + (1 - u) (g / (1 - P))
// w' = w - lr (m_hat / (sqrt(v' / (1 - b2^t)) + eps));  decay as Lion.

class MultiApplyNadamOp : public MultiApplyBase {
 public:
  explicit MultiApplyNadamOp(OpKernelConstruction* ctx)
      : MultiApplyBase(ctx, 2, /*has_scale_grad=*/true) {}

 protected:
  void Prepare(OpKernelContext* ctx) override {
    const int s = scalars_first();
    float* out[] = {&lr_, &b1_, &c1_, &b2_, &c2_, &u_next_, &d_next_,
                    &one_minus_u_, &d_, &cb2_, &eps_, &factor_, &wd_};
    for (int i = 0; i < 13; ++i) *out[i] = Scalar(ctx, s + i);
  }
  void Update(float* w, float* const* slots, const float* g, int64_t n,
              bool decay) const override {
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
    const float lr = lr_, b1 = b1_, c1 = c1_, b2 = b2_, c2 = c2_;
    const float un = u_next_, dn = d_next_, ou = one_minus_u_, d = d_;
    const float cb2 = cb2_, eps = eps_, f = factor_, wd = wd_;
    for (int64_t i = 0; i < n; ++i) {
      const float gi = kScale ? g[i] * f : g[i];
      const float mi = c1 * gi + b1 * m[i];
      const float vi = c2 * (gi * gi) + b2 * v[i];
      m[i] = mi;
      v[i] = vi;
      const float m_hat = un * (mi / dn) + ou * (gi / d);
      const float w0 = w[i];
      float w1 = w0 - lr * (m_hat / (std::sqrt(vi / cb2) + eps));
      if (kDecay) w1 = w1 - wd * w0;
      w[i] = w1;
    }
  }

  float lr_ = 0.f, b1_ = 0.f, c1_ = 0.f, b2_ = 0.f, c2_ = 0.f;
  float u_next_ = 0.f, d_next_ = 1.f, one_minus_u_ = 0.f, d_ = 1.f;
  float cb2_ = 1.f, eps_ = 0.f, factor_ = 1.f, wd_ = 0.f;
};

// ---- TfLearnerMultiApplyAMSGrad --------------------------------------------
// Inputs: vars, ms, vs, v_maxs, grads, lr, beta1, one_minus_beta1, beta2,
// one_minus_beta2, correction1, correction2, epsilon, grad_factor, wd_rate.
// m' = (1 - b1) g + b1 m;  v' = (1 - b2) g^2 + b2 v
// v_max' = max(v_max, v' / correction2)
// w' = w - lr ((m' / correction1) / (sqrt(v_max') + eps));  decay as Lion.
// (A correction of 1 stands for "no bias correction": x / 1 = x exactly.)

class MultiApplyAMSGradOp : public MultiApplyBase {
 public:
  explicit MultiApplyAMSGradOp(OpKernelConstruction* ctx)
      : MultiApplyBase(ctx, 3, /*has_scale_grad=*/true) {}

 protected:
  void Prepare(OpKernelContext* ctx) override {
    const int s = scalars_first();
    float* out[] = {&lr_, &b1_, &c1_, &b2_, &c2_, &k1_, &k2_, &eps_,
                    &factor_, &wd_};
    for (int i = 0; i < 10; ++i) *out[i] = Scalar(ctx, s + i);
  }
  void Update(float* w, float* const* slots, const float* g, int64_t n,
              bool decay) const override {
    WithFlags(
        [&](auto s, auto d) {
          Run<decltype(s)::value, decltype(d)::value>(w, slots, g, n);
        },
        scale_grad(), decay);
  }

 private:
  template <bool kScale, bool kDecay>
  void Run(float* __restrict__ w, float* const* slots,
           const float* __restrict__ g, int64_t n) const {
    float* __restrict__ m = slots[0];
    float* __restrict__ v = slots[1];
    float* __restrict__ vmax = slots[2];
    const float lr = lr_, b1 = b1_, c1 = c1_, b2 = b2_, c2 = c2_;
    const float k1 = k1_, k2 = k2_, eps = eps_, f = factor_, wd = wd_;
    for (int64_t i = 0; i < n; ++i) {
      const float gi = kScale ? g[i] * f : g[i];
      const float mi = c1 * gi + b1 * m[i];
      const float vi = c2 * (gi * gi) + b2 * v[i];
      m[i] = mi;
      v[i] = vi;
      const float vm = MaxNaN(vmax[i], vi / k2);
      vmax[i] = vm;
      const float w0 = w[i];
      float w1 = w0 - lr * ((mi / k1) / (std::sqrt(vm) + eps));
      if (kDecay) w1 = w1 - wd * w0;
      w[i] = w1;
    }
  }

  float lr_ = 0.f, b1_ = 0.f, c1_ = 0.f, b2_ = 0.f, c2_ = 0.f;
  float k1_ = 1.f, k2_ = 1.f, eps_ = 0.f, factor_ = 1.f, wd_ = 0.f;
};

// ---- TfLearnerMultiApplyScheduleFree{SGD,AdamW} -----------------------------
// Inputs: vars (y), zs, xs, [vs,] grads, first (bool), lr_z, c, one_minus_c,
// b1, one_minus_b1, wd, [beta2, one_minus_beta2, correction2, epsilon,]
// grad_factor (bracketed: AdamW only).
// u = g (SGD);  v' = b2 v + ((1 - b2) g) g, u = g / (sqrt(v' / (1 - b2^t))
// + eps) (AdamW);  decay: u = u + wd y.  z0, x0 = y if first else z, x
// z' = z0 - lr_z u;  x' = (1 - c) x0 + c z';  y' = b1 x' + (1 - b1) z'.
// (Here wd is the rule's own decoupled_weight_decay, not lr * wd: the
// schedule-free rules decay inside u, as the reference does.)

template <bool kAdam>
class MultiApplyScheduleFreeOp : public MultiApplyBase {
 public:
  explicit MultiApplyScheduleFreeOp(OpKernelConstruction* ctx)
      : MultiApplyBase(ctx, kAdam ? 3 : 2, /*has_scale_grad=*/true) {}

 protected:
  void Prepare(OpKernelContext* ctx) override {
    const int s = scalars_first();
    first_ = ctx->input(s).scalar<bool>()();
    float* out[] = {&lr_z_, &c_, &one_minus_c_, &b1_, &one_minus_b1_, &wd_,
                    &b2_, &c2_, &k2_, &eps_};
    const int count = kAdam ? 10 : 6;
    for (int i = 0; i < count; ++i) *out[i] = Scalar(ctx, s + 1 + i);
    factor_ = Scalar(ctx, s + 1 + count);
  }
  void Update(float* w, float* const* slots, const float* g, int64_t n,
              bool decay) const override {
    WithFlags(
        [&](auto s, auto f, auto d) {
          Run<decltype(s)::value, decltype(f)::value, decltype(d)::value>(
              w, slots, g, n);
        },
        scale_grad(), first_, decay);
  }

 private:
  template <bool kScale, bool kFirst, bool kDecay>
  void Run(float* __restrict__ w, float* const* slots,
           const float* __restrict__ g, int64_t n) const {
    float* __restrict__ z = slots[0];
    float* __restrict__ x = slots[1];
    float* __restrict__ v = slots[2];
    const float lr_z = lr_z_, c = c_, omc = one_minus_c_, b1 = b1_;
    const float omb1 = one_minus_b1_, wd = wd_, b2 = b2_, c2 = c2_;
    const float k2 = k2_, eps = eps_, f = factor_;
    for (int64_t i = 0; i < n; ++i) {
      const float gi = kScale ? g[i] * f : g[i];
      float u = gi;
      if (kAdam) {
        const float vi = b2 * v[i] + (c2 * gi) * gi;
        v[i] = vi;
        u = gi / (std::sqrt(vi / k2) + eps);
      }
      const float y = w[i];
      if (kDecay) u = u + wd * y;
      const float z0 = kFirst ? y : z[i];
      const float x0 = kFirst ? y : x[i];
      const float z1 = z0 - lr_z * u;
      const float x1 = omc * x0 + c * z1;
      z[i] = z1;
      x[i] = x1;
      w[i] = b1 * x1 + omb1 * z1;
    }
  }

  bool first_ = false;
  float lr_z_ = 0.f, c_ = 0.f, one_minus_c_ = 1.f, b1_ = 0.f;
  float one_minus_b1_ = 1.f, wd_ = 0.f, b2_ = 0.f, c2_ = 0.f, k2_ = 1.f;
  float eps_ = 0.f, factor_ = 1.f;
};

}  // namespace

// ---- registration -----------------------------------------------------------

#define TF_LEARNER_RULE_ATTRS                     \
  Attr("N: int >= 1")                             \
      .Output("weights_half_sum_squares: float")  \
      .Attr("decay: list(bool)")                  \
      .Attr("measure_weights: bool = false")      \
      .Attr("scale_grad: bool = false")           \
      .SetIsStateful()                            \
      .SetShapeFn(::tensorflow::shape_inference::ScalarShape)

REGISTER_OP("TfLearnerMultiApplyLion")
    .Input("vars: N * resource")
    .Input("ms: N * resource")
    .Input("grads: N * float")
    .Input("lr: float")
    .Input("beta1: float")
    .Input("one_minus_beta1: float")
    .Input("beta2: float")
    .Input("one_minus_beta2: float")
    .Input("grad_factor: float")
    .Input("wd_rate: float")
    .TF_LEARNER_RULE_ATTRS;

REGISTER_OP("TfLearnerMultiApplyNadam")
    .Input("vars: N * resource")
    .Input("ms: N * resource")
    .Input("vs: N * resource")
    .Input("grads: N * float")
    .Input("lr: float")
    .Input("beta1: float")
    .Input("one_minus_beta1: float")
    .Input("beta2: float")
    .Input("one_minus_beta2: float")
    .Input("u_next: float")
    .Input("one_minus_p_next: float")
    .Input("one_minus_u: float")
    .Input("one_minus_p: float")
    .Input("one_minus_beta2_power: float")
    .Input("epsilon: float")
    .Input("grad_factor: float")
    .Input("wd_rate: float")
    .TF_LEARNER_RULE_ATTRS;

REGISTER_OP("TfLearnerMultiApplyAMSGrad")
    .Input("vars: N * resource")
    .Input("ms: N * resource")
    .Input("vs: N * resource")
    .Input("v_maxs: N * resource")
    .Input("grads: N * float")
    .Input("lr: float")
    .Input("beta1: float")
    .Input("one_minus_beta1: float")
    .Input("beta2: float")
    .Input("one_minus_beta2: float")
    .Input("correction1: float")
    .Input("correction2: float")
    .Input("epsilon: float")
    .Input("grad_factor: float")
    .Input("wd_rate: float")
    .TF_LEARNER_RULE_ATTRS;

REGISTER_OP("TfLearnerMultiApplyScheduleFreeSGD")
    .Input("vars: N * resource")
    .Input("zs: N * resource")
    .Input("xs: N * resource")
    .Input("grads: N * float")
    .Input("first: bool")
    .Input("lr_z: float")
    .Input("c: float")
    .Input("one_minus_c: float")
    .Input("b1: float")
    .Input("one_minus_b1: float")
    .Input("wd: float")
    .Input("grad_factor: float")
    .TF_LEARNER_RULE_ATTRS;

REGISTER_OP("TfLearnerMultiApplyScheduleFreeAdamW")
    .Input("vars: N * resource")
    .Input("zs: N * resource")
    .Input("xs: N * resource")
    .Input("vs: N * resource")
    .Input("grads: N * float")
    .Input("first: bool")
    .Input("lr_z: float")
    .Input("c: float")
    .Input("one_minus_c: float")
    .Input("b1: float")
    .Input("one_minus_b1: float")
    .Input("wd: float")
    .Input("beta2: float")
    .Input("one_minus_beta2: float")
    .Input("correction2: float")
    .Input("epsilon: float")
    .Input("grad_factor: float")
    .TF_LEARNER_RULE_ATTRS;

#undef TF_LEARNER_RULE_ATTRS

REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplyLion").Device(::tensorflow::DEVICE_CPU),
    MultiApplyLionOp);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplyNadam").Device(::tensorflow::DEVICE_CPU),
    MultiApplyNadamOp);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplyAMSGrad").Device(::tensorflow::DEVICE_CPU),
    MultiApplyAMSGradOp);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplyScheduleFreeSGD").Device(::tensorflow::DEVICE_CPU),
    MultiApplyScheduleFreeOp<false>);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplyScheduleFreeAdamW")
        .Device(::tensorflow::DEVICE_CPU),
    MultiApplyScheduleFreeOp<true>);

}  // namespace tf_learner
