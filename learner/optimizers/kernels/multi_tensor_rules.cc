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
// the tests compare them bit for bit
// (tests/test_optimizers/test_rule_kernels.py).
// A division by a correction of exactly 1 (AMSGrad without bias correction)
// is exact, so one loop serves both settings.

#include "multi_tensor_common.h"

namespace tf_learner {
namespace {

using common::MultiApplyOp;
using common::RuleBase;
using common::ScalarInputs;

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

// Each rule is only its step; MultiApplyOp (multi_tensor_common.h) does the
// rest, including the gradient factor and the decay. A rule's constructor
// reads the scalar inputs in the order its registration (below) lists them.

// TfLearnerMultiApplyLion: Lion's step (learner/optimizers/rules/lion.py).
struct LionRule : RuleBase {
  static constexpr int kSlots = 1;

  explicit LionRule(ScalarInputs* in) {
    in->Read(&lr, &b1, &c1, &b2, &c2, &factor, &wd);
  }

  float Step(int64_t i, float w, float g, float* m) const {
    const float mi = m[i];
    const float c = b1 * mi + c1 * g;
    m[i] = b2 * mi + c2 * g;
    return w - lr * Sign(c);
  }

  float lr = 0.f, b1 = 0.f, c1 = 0.f, b2 = 0.f, c2 = 0.f;
};

// TfLearnerMultiApplyNadam: Nadam's step (learner/optimizers/rules/
// adam_family.py, Nadam: optax's / Keras's form), its momentum schedule
// (u, 1 - P) computed in Python and passed in.
struct NadamRule : RuleBase {
  static constexpr int kSlots = 2;

  explicit NadamRule(ScalarInputs* in) {
    in->Read(&lr, &b1, &c1, &b2, &c2, &u_next, &d_next, &one_minus_u, &d,
             &cb2, &eps, &factor, &wd);
  }

  float Step(int64_t i, float w, float g, float* m, float* v) const {
    const float mi = c1 * g + b1 * m[i];
    const float vi = c2 * (g * g) + b2 * v[i];
    m[i] = mi;
    v[i] = vi;
    const float m_hat = u_next * (mi / d_next) + one_minus_u * (g / d);
    return w - lr * (m_hat / (std::sqrt(vi / cb2) + eps));
  }

  float lr = 0.f, b1 = 0.f, c1 = 0.f, b2 = 0.f, c2 = 0.f;
  float u_next = 0.f, d_next = 1.f, one_minus_u = 0.f, d = 1.f;
  float cb2 = 1.f, eps = 0.f;
};

// TfLearnerMultiApplyAMSGrad: AMSGrad's step (learner/optimizers/rules/
// adam_family.py, AMSGrad: optax's form). A correction (k1, k2) of 1 stands
// for "no bias correction" (x / 1 = x exactly, so one loop serves both).
struct AMSGradRule : RuleBase {
  static constexpr int kSlots = 3;

  explicit AMSGradRule(ScalarInputs* in) {
    in->Read(&lr, &b1, &c1, &b2, &c2, &k1, &k2, &eps, &factor, &wd);
  }

  float Step(int64_t i, float w, float g, float* m, float* v,
             float* vmax) const {
    const float mi = c1 * g + b1 * m[i];
    const float vi = c2 * (g * g) + b2 * v[i];
    m[i] = mi;
    v[i] = vi;
    const float vm = MaxNaN(vmax[i], vi / k2);
    vmax[i] = vm;
    return w - lr * ((mi / k1) / (std::sqrt(vm) + eps));
  }

  float lr = 0.f, b1 = 0.f, c1 = 0.f, b2 = 0.f, c2 = 0.f;
  float k1 = 1.f, k2 = 1.f, eps = 0.f;
};

// TfLearnerMultiApplyScheduleFree{SGD,AdamW}: the schedule-free step
// (learner/optimizers/rules/schedule_free.py, _ScheduleFree._UpdateOne) on
// w = y, with slots z, x (and v for AdamW). `flag` is the input `first` (z
// and x start from y). No wd_rate: wd is the rule's own
// decoupled_weight_decay, not lr * wd, and the rule decays inside its step
// (kDecayInStep), as the reference does.
template <bool kAdam>
struct ScheduleFreeRule : RuleBase {
  static constexpr int kSlots = kAdam ? 3 : 2;
  static constexpr bool kHasFlag = true;
  static constexpr bool kDecayInStep = true;

  explicit ScheduleFreeRule(ScalarInputs* in) {
    in->Read(&flag, &lr_z, &c, &one_minus_c, &b1, &one_minus_b1, &wd);
    if (kAdam) in->Read(&b2, &c2, &k2, &eps);
    in->Read(&factor);
  }

  // v: the AdamW slot (none for SGD).
  template <bool kFirst, bool kDecay>
  float Step(int64_t i, float y, float g, float* z, float* x,
             float* v = nullptr) const {
    float u = g;
    if (kAdam) {
      const float vi = b2 * v[i] + (c2 * g) * g;
      v[i] = vi;
      u = g / (std::sqrt(vi / k2) + eps);
    }
    if (kDecay) u = u + wd * y;
    const float z0 = kFirst ? y : z[i];
    const float x0 = kFirst ? y : x[i];
    const float z1 = z0 - lr_z * u;
    const float x1 = one_minus_c * x0 + c * z1;
    z[i] = z1;
    x[i] = x1;
    return b1 * x1 + one_minus_b1 * z1;
  }

  float lr_z = 0.f, c = 0.f, one_minus_c = 1.f, b1 = 0.f;
  float one_minus_b1 = 1.f, b2 = 0.f, c2 = 0.f, k2 = 1.f, eps = 0.f;
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
    MultiApplyOp<LionRule>);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplyNadam").Device(::tensorflow::DEVICE_CPU),
    MultiApplyOp<NadamRule>);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplyAMSGrad").Device(::tensorflow::DEVICE_CPU),
    MultiApplyOp<AMSGradRule>);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplyScheduleFreeSGD").Device(::tensorflow::DEVICE_CPU),
    MultiApplyOp<ScheduleFreeRule<false>>);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplyScheduleFreeAdamW")
        .Device(::tensorflow::DEVICE_CPU),
    MultiApplyOp<ScheduleFreeRule<true>>);

}  // namespace tf_learner
