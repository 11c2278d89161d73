// Multi-tensor CPU kernels of the newer update rules (issue 27, item 5): one
// op per step for the memory-bound elementwise rules.
//
//   TfLearnerMultiApplyLion     Lion (Chen et al. 2023)        slot m
//   TfLearnerMultiApplyNadam    Nadam in optax's / Keras's form  slots m, v
//   TfLearnerMultiApplyAMSGrad  AMSGrad in optax's form          slots m, v, v_max
//   TfLearnerMultiApplyScheduleFreeSGD    schedule-free SGD     slots z, x
//   TfLearnerMultiApplyScheduleFreeAdamW  schedule-free AdamW   slots z, x, v
//   TfLearnerMultiApplyAdEMAMix  AdEMAMix (issue 40)         slots m1, m2, nu
//   TfLearnerMultiApplySimplifiedAdEMAMix  simplified AdEMAMix  slots m, nu
//   TfLearnerMultiApplyCOCOB     COCOB-Backprop    slots x0, L, G, R, C
//   TfLearnerMultiApplyMADGRAD   MADGRAD           slots x0, s, nu
//   TfLearnerMultiMuonMomentum   Muon's momentum and direction  slot m
//   TfLearnerMultiApplyMuon      Muon's w <- w - rate * O (- decay)
//
// (Muon, issue 40 item 2, is a whole-tensor rule: its Newton-Schulz
// iteration runs in TF between its two elementwise ops, so the momentum
// op outputs the directions u instead of updating the weights.)
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
// (tests/test_optimizers/test_rule_kernels.py, test_rule_kernels_issue40.py).
// A division by a correction of exactly 1 (AMSGrad without bias correction)
// is exact, so one loop serves both settings. MADGRAD's cube root is the
// pure-TF path's formula of plain operations (CubeRoot below), not TF's Pow.

#include <cstdint>
#include <cstring>

#include "multi_tensor_common.h"

namespace tf_learner {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using common::Chunk;
using common::ForEachChunkReversed;
using common::LockedVariables;
using common::MakeChunks;
using common::MultiApplyOp;
using common::RuleBase;
using common::SameShapes;
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

// TfLearnerMultiApplyAdEMAMix: AdEMAMix's step (learner/optimizers/rules/
// ademamix.py): a bias-corrected fast EMA m1 plus alpha times the slow
// EMA m2, over Adam's sqrt(nu_hat) + eps.
struct AdEMAMixRule : RuleBase {
  static constexpr int kSlots = 3;

  explicit AdEMAMixRule(ScalarInputs* in) {
    in->Read(&lr, &b1, &c1, &b2, &c2, &b3, &c3, &k1, &k2, &alpha, &eps,
             &factor, &wd);
  }

  float Step(int64_t i, float w, float g, float* m1, float* m2,
             float* nu) const {
    const float a = b1 * m1[i] + c1 * g;
    const float b = b3 * m2[i] + c3 * g;
    const float n = b2 * nu[i] + c2 * (g * g);
    m1[i] = a;
    m2[i] = b;
    nu[i] = n;
    const float numer = a / k1 + alpha * b;
    return w - (lr * numer) / (std::sqrt(n / k2) + eps);
  }

  float lr = 0.f, b1 = 0.f, c1 = 0.f, b2 = 0.f, c2 = 0.f, b3 = 0.f;
  float c3 = 0.f, k1 = 1.f, k2 = 1.f, alpha = 0.f, eps = 0.f;
};

// TfLearnerMultiApplySimplifiedAdEMAMix: simplified AdEMAMix's step
// (learner/optimizers/rules/simplified_ademamix.py): the undamped sum m
// plus alpha g, over sqrt(nu_hat) + eps.
struct SimplifiedAdEMAMixRule : RuleBase {
  static constexpr int kSlots = 2;

  explicit SimplifiedAdEMAMixRule(ScalarInputs* in) {
    in->Read(&lr, &b1, &b2, &c2, &k2, &alpha, &eps, &factor, &wd);
  }

  float Step(int64_t i, float w, float g, float* m, float* nu) const {
    const float mi = b1 * m[i] + g;
    const float n = b2 * nu[i] + c2 * (g * g);
    m[i] = mi;
    nu[i] = n;
    return w - (lr * (mi + alpha * g)) / (std::sqrt(n / k2) + eps);
  }

  float lr = 0.f, b1 = 0.f, b2 = 0.f, c2 = 0.f, k2 = 1.f, alpha = 0.f;
  float eps = 0.f;
};

// TfLearnerMultiApplyCOCOB: COCOB-Backprop's step (learner/optimizers/
// rules/cocob.py) on g <- lr g. `flag` is the input `first` (x0 is taken
// from w then, and written only then: it never changes after). The rule
// gives the new weights as w - (w - new), as its pure-TF path subtracts
// the delta (not equal to `new` in float32).
struct COCOBRule : RuleBase {
  static constexpr int kSlots = 5;
  static constexpr bool kHasFlag = true;

  explicit COCOBRule(ScalarInputs* in) {
    in->Read(&flag, &lr, &alpha, &factor, &wd);
  }

  template <bool kFirst, bool kDecay>
  float Step(int64_t i, float w, float g, float* x0, float* scale,
             float* subgrads, float* reward, float* cumulative) const {
    const float gl = lr * g;
    const float x = kFirst ? w : x0[i];
    const float a = std::fabs(gl);
    const float l = MaxNaN(scale[i], a);
    const float s = subgrads[i] + a;
    const float r = MaxNaN(reward[i] - gl * (w - x), 0.f);
    const float c = cumulative[i] - gl;
    if (kFirst) x0[i] = x;
    scale[i] = l;
    subgrads[i] = s;
    reward[i] = r;
    cumulative[i] = c;
    const float bet = c / (l * MaxNaN(s + l, alpha * l));
    const float next = x + bet * (l + r);
    return w - (w - next);
  }

  float lr = 0.f, alpha = 1.f;
};

// MADGRAD's cube root: `CubeRoot` of learner/optimizers/rules/madgrad.py,
// its float32 operations in its order (the pure-TF path's bits; its
// docstring has the method and the accuracy: within 1 ulp of the rounded
// root). The integer steps and the selects are written as masks from
// shifts, not compares: a compare lets g++ split the loop into paths, move
// the float arithmetic under a branch (-ftrapping-math) and not vectorize.
// They give the pure-TF path's tf.where exactly. No call and no branch:
// the loop vectorizes (g++ 12, -march=native: packed conversions and
// divisions in every MADGRAD loop).
inline float CubeRoot(float x) {
  constexpr float kThird = 1.f / 3.f;
  constexpr float kMagic = 1419910656.f;  // 0x54a21e00.
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  const uint32_t ua = u & 0x7fffffffu;  // |x|'s bits.
  // sub = all ones iff ua < 0x00800000 (0 or subnormal).
  const uint32_t sub =
      static_cast<uint32_t>(static_cast<int32_t>(ua - 0x00800000u) >> 31);
  // A subnormal as x 2^150: its bits as an integer, times 2 (exact).
  const float scaled = static_cast<float>(static_cast<int32_t>(ua)) * 2.f;
  uint32_t scaled_bits;
  std::memcpy(&scaled_bits, &scaled, sizeof(scaled_bits));
  const uint32_t xs_bits = (scaled_bits & sub) | (ua & ~sub);
  float xs;
  std::memcpy(&xs, &xs_bits, sizeof(xs));
  // fdlibm's bit guess, for x^(-1/3).
  const float guess =
      kMagic - static_cast<float>(static_cast<int32_t>(xs_bits)) * kThird;
  const uint32_t w_bits = static_cast<uint32_t>(static_cast<int32_t>(guess));
  float w;
  std::memcpy(&w, &w_bits, sizeof(w));
  // Two Newton steps w <- w (4 - x w^3) / 3, in the pure-TF path's form.
  w = w - (w * (xs * w * w * w) - w) * kThird;
  w = w - (w * (xs * w * w * w) - w) * kThird;
  float y = xs * w * w;
  y = y + (xs / (y * y) - y) * kThird;
  // 2^-50 (0x26800000) for a subnormal, else 1.
  const uint32_t scale_bits = (0x26800000u & sub) | (0x3f800000u & ~sub);
  float scale;
  std::memcpy(&scale, &scale_bits, sizeof(scale));
  y = y * scale;
  uint32_t y_bits;
  std::memcpy(&y_bits, &y, sizeof(y_bits));
  const uint32_t signed_bits = y_bits | (u ^ ua);
  // ok = all ones iff 0 < ua < 0x7f800000; else x itself (+-0, inf, NaN).
  const int32_t nonzero = static_cast<int32_t>(0u - ua) >> 31;
  const int32_t below_inf = static_cast<int32_t>(ua - 0x7f800000u) >> 31;
  const uint32_t ok = static_cast<uint32_t>(nonzero & below_inf);
  const uint32_t r = (signed_bits & ok) | (u & ~ok);
  float result;
  std::memcpy(&result, &r, sizeof(result));
  return result;
}

// TfLearnerMultiApplyMADGRAD: MADGRAD's step (learner/optimizers/rules/
// madgrad.py) with lambda_k computed in Python. `flag` is the input
// `first` (x0 taken from w then, and written only then). The new weights
// come as w - (w - new), as COCOB's.
struct MADGRADRule : RuleBase {
  static constexpr int kSlots = 3;
  static constexpr bool kHasFlag = true;

  explicit MADGRADRule(ScalarInputs* in) {
    in->Read(&flag, &lamb, &eps, &mom, &one_minus_mom, &factor, &wd);
  }

  template <bool kFirst, bool kDecay>
  float Step(int64_t i, float w, float g, float* x0, float* s,
             float* nu) const {
    const float x = kFirst ? w : x0[i];
    const float n = nu[i] + lamb * (g * g);
    const float si = s[i] + lamb * g;
    if (kFirst) x0[i] = x;
    s[i] = si;
    nu[i] = n;
    const float z = x - si / (CubeRoot(n) + eps);
    const float next = one_minus_mom * z + mom * w;
    return w - (w - next);
  }

  float lamb = 0.f, eps = 0.f, mom = 0.f, one_minus_mom = 1.f;
};

// ---- Muon (learner/optimizers/rules/muon.py) --------------------------------

// TfLearnerMultiMuonMomentum's scalars, read in its registration order.
struct MuonScalars {
  explicit MuonScalars(ScalarInputs* in) {
    in->Read(&beta, &c1, &c1_f32, &k, &k_next, &factor);
  }

  // beta; c1 = 1 - beta rounded from float64 (the m update's); c1_f32 = 1 -
  // beta computed in float32 (the direction's g term); k, k_next = 1 -
  // beta^t, 1 - beta^(t+1) (bias correction; unused without it).
  float beta = 0.f, c1 = 0.f, c1_f32 = 0.f, k = 1.f, k_next = 1.f;
  float factor = 1.f;
};

// Muon._Momentum and _Direction on n elements: m <- beta m + c1 g, and u,
// the direction Newton-Schulz orthogonalises, in the pure-TF path's order
// of operations (kCorrect: momentum_form 'optax', bias-corrected).
template <bool kScale, bool kNesterov, bool kCorrect>
__attribute__((noinline)) void MuonMomentumLoop(const MuonScalars& scalars,
                                                float* __restrict__ m,
                                                const float* __restrict__ g,
                                                float* __restrict__ u,
                                                int64_t n) {
  const MuonScalars s = scalars;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = kScale ? g[i] * s.factor : g[i];
    const float mi = s.beta * m[i] + s.c1 * gi;
    m[i] = mi;
    if (kCorrect) {
      u[i] = kNesterov ? (s.beta * mi) / s.k_next + (s.c1_f32 * gi) / s.k
                       : mi / s.k;
    } else {
      u[i] = kNesterov ? s.beta * mi + s.c1_f32 * gi : mi;
    }
  }
}

// Inputs: ms (N resources), grads (N), then MuonScalars' scalars. Attrs:
// nesterov, bias_correction, scale_grad (g <- g * grad_factor first).
// Outputs: directions (N tensors, each its gradient's shape). m is updated
// in place. Errors (InvalidArgument): a slot whose shape is not its
// gradient's (before any element is written).
class MultiMuonMomentumOp : public OpKernel {
 public:
  explicit MultiMuonMomentumOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("N", &n_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("nesterov", &nesterov_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("bias_correction", &correct_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scale_grad", &scale_grad_));
  }

  void Compute(OpKernelContext* ctx) override {
    std::vector<int> inputs(n_);
    for (int i = 0; i < n_; ++i) inputs[i] = i;
    LockedVariables ms(ctx, inputs);
    if (!ctx->status().ok()) return;
    if (!SameShapes(ctx, ms, 1, n_, n_, /*name_group=*/true)) return;
    ScalarInputs in(ctx, 2 * n_);
    const MuonScalars scalars(&in);
    std::vector<int64_t> sizes(n_);
    std::vector<const float*> g(n_);
    std::vector<float*> u(n_);
    for (int i = 0; i < n_; ++i) {
      const Tensor& grad = ctx->input(n_ + i);
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(i, grad.shape(), &out));
      sizes[i] = grad.NumElements();
      g[i] = grad.flat<float>().data();
      u[i] = out->flat<float>().data();
    }
    const std::vector<Chunk> chunks = MakeChunks(sizes);
    // Reversed: the gradient norm op read g forward just before.
    ForEachChunkReversed(ctx, chunks.size(), [&](int64_t c) {
      const Chunk& k = chunks[c];
      common::WithFlags(
          [&](auto s, auto nesterov, auto correct) {
            MuonMomentumLoop<decltype(s)::value, decltype(nesterov)::value,
                             decltype(correct)::value>(
                scalars, ms.data(k.tensor) + k.begin, g[k.tensor] + k.begin,
                u[k.tensor] + k.begin, k.end - k.begin);
          },
          scale_grad_, nesterov_, correct_);
    });
  }

 private:
  int n_ = 0;
  bool nesterov_ = false;
  bool correct_ = false;
  bool scale_grad_ = false;
};

// TfLearnerMultiApplyMuon: w <- w - rate_t * O, O the orthogonalised
// direction (the op's "gradient" input) and rate_t = lr * s of variable t
// (Muon._Rate, computed in TF). Decay as the pure-TF path subtracts it:
// separately, (w - rate O) - wd w_old, or (`flag`, attr merged_decay: the
// batched path, Muon._ApplyStack) in one delta, w - (rate O + wd w_old).
struct MuonRule : RuleBase {
  static constexpr int kSlots = 0;
  static constexpr bool kScaleGrad = false;
  static constexpr const char* kFlagAttr = "merged_decay";
  static constexpr bool kHasFlag = true;
  static constexpr bool kDecayInStep = true;
  static constexpr bool kPerTensor = true;

  explicit MuonRule(ScalarInputs* in) { in->Read(&rates, &wd); }

  bool Check(OpKernelContext* ctx, int n) const {
    if (rates->dims() == 1 && rates->NumElements() == n) return true;
    ctx->CtxFailure(tensorflow::errors::InvalidArgument(
        "rates has shape ", rates->shape().DebugString(), ", expected [", n,
        "] (one rate per variable)"));
    return false;
  }

  void ForTensor(int t) { rate = rates->flat<float>()(t); }

  template <bool kMerged, bool kDecay>
  float Step(int64_t, float w, float o) const {
    if (!kDecay) return w - rate * o;
    if (kMerged) return w - (rate * o + wd * w);
    return (w - rate * o) - wd * w;
  }

  const Tensor* rates = nullptr;
  float rate = 0.f;
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

REGISTER_OP("TfLearnerMultiApplyAdEMAMix")
    .Input("vars: N * resource")
    .Input("m1s: N * resource")
    .Input("m2s: N * resource")
    .Input("nus: N * resource")
    .Input("grads: N * float")
    .Input("lr: float")
    .Input("beta1: float")
    .Input("one_minus_beta1: float")
    .Input("beta2: float")
    .Input("one_minus_beta2: float")
    .Input("beta3: float")
    .Input("one_minus_beta3: float")
    .Input("correction1: float")
    .Input("correction2: float")
    .Input("alpha: float")
    .Input("epsilon: float")
    .Input("grad_factor: float")
    .Input("wd_rate: float")
    .TF_LEARNER_RULE_ATTRS;

REGISTER_OP("TfLearnerMultiApplySimplifiedAdEMAMix")
    .Input("vars: N * resource")
    .Input("ms: N * resource")
    .Input("nus: N * resource")
    .Input("grads: N * float")
    .Input("lr: float")
    .Input("beta1: float")
    .Input("beta2: float")
    .Input("one_minus_beta2: float")
    .Input("correction2: float")
    .Input("alpha: float")
    .Input("epsilon: float")
    .Input("grad_factor: float")
    .Input("wd_rate: float")
    .TF_LEARNER_RULE_ATTRS;

REGISTER_OP("TfLearnerMultiApplyCOCOB")
    .Input("vars: N * resource")
    .Input("x0s: N * resource")
    .Input("scales: N * resource")
    .Input("subgradients: N * resource")
    .Input("rewards: N * resource")
    .Input("cumulative_gradients: N * resource")
    .Input("grads: N * float")
    .Input("first: bool")
    .Input("lr: float")
    .Input("alpha: float")
    .Input("grad_factor: float")
    .Input("wd_rate: float")
    .TF_LEARNER_RULE_ATTRS;

REGISTER_OP("TfLearnerMultiApplyMADGRAD")
    .Input("vars: N * resource")
    .Input("x0s: N * resource")
    .Input("ss: N * resource")
    .Input("grad_sum_sqs: N * resource")
    .Input("grads: N * float")
    .Input("first: bool")
    .Input("lambda: float")
    .Input("epsilon: float")
    .Input("momentum: float")
    .Input("one_minus_momentum: float")
    .Input("grad_factor: float")
    .Input("wd_rate: float")
    .TF_LEARNER_RULE_ATTRS;

REGISTER_OP("TfLearnerMultiApplyMuon")
    .Input("vars: N * resource")
    .Input("directions: N * float")
    .Input("rates: float")
    .Input("wd_rate: float")
    .Attr("merged_decay: bool = false")
    .TF_LEARNER_RULE_ATTRS;

#undef TF_LEARNER_RULE_ATTRS

REGISTER_OP("TfLearnerMultiMuonMomentum")
    .Input("ms: N * resource")
    .Input("grads: N * float")
    .Input("beta: float")
    .Input("one_minus_beta: float")
    .Input("one_minus_beta_f32: float")
    .Input("correction: float")
    .Input("next_correction: float")
    .Input("grad_factor: float")
    .Output("directions: N * float")
    .Attr("N: int >= 1")
    .Attr("nesterov: bool")
    .Attr("bias_correction: bool")
    .Attr("scale_grad: bool = false")
    .SetIsStateful()
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      int n;
      TF_RETURN_IF_ERROR(c->GetAttr("N", &n));
      for (int i = 0; i < n; ++i) c->set_output(i, c->input(n + i));
      return absl::OkStatus();
    });

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

REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplyAdEMAMix").Device(::tensorflow::DEVICE_CPU),
    MultiApplyOp<AdEMAMixRule>);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplySimplifiedAdEMAMix")
        .Device(::tensorflow::DEVICE_CPU),
    MultiApplyOp<SimplifiedAdEMAMixRule>);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplyCOCOB").Device(::tensorflow::DEVICE_CPU),
    MultiApplyOp<COCOBRule>);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplyMADGRAD").Device(::tensorflow::DEVICE_CPU),
    MultiApplyOp<MADGRADRule>);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiMuonMomentum").Device(::tensorflow::DEVICE_CPU),
    MultiMuonMomentumOp);
REGISTER_KERNEL_BUILDER(
    Name("TfLearnerMultiApplyMuon").Device(::tensorflow::DEVICE_CPU),
    MultiApplyOp<MuonRule>);

}  // namespace tf_learner
