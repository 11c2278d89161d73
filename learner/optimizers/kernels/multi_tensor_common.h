// What the multi-tensor ops of multi_tensor_ops.cc and multi_tensor_rules.cc
// share: the chunk split over threads, the locked variables and their shape
// check, the scalar inputs, the dispatch of run-time flags to template
// arguments (WithFlags) and the one skeleton of every apply op
// (MultiApplyOp: inputs and attrs, locking, shape checks, the in-pass weight
// measure, decay, gradient scale, the loop), which each rule fills with
// only its step (a rule struct).
//
// In its own namespace (tf_learner::common) so the two translation units of
// the library share one definition. ForEachChunk below says why the split
// is not TF's ParallelFor; the head of multi_tensor_ops.cc, why the loops
// round exactly as TF's own kernels.

#ifndef TF_LEARNER_MULTI_TENSOR_COMMON_H_
#define TF_LEARNER_MULTI_TENSOR_COMMON_H_

#define EIGEN_USE_THREADS

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/kernels/training_op_helpers.h"
#include "tensorflow/core/platform/threadpool.h"

namespace tf_learner {
namespace common {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using CPUDevice = Eigen::ThreadPoolDevice;

constexpr int64_t kChunk = 1 << 14;  // 16384 floats = 64 KiB per array.
constexpr int kMaxSlots = 5;  // COCOB's five slots.

struct Chunk {
  int tensor;
  int64_t begin;
  int64_t end;
};

// Chunks of at most kChunk elements, none spanning two tensors.
inline std::vector<Chunk> MakeChunks(const std::vector<int64_t>& sizes) {
  std::vector<Chunk> chunks;
  for (int t = 0; t < static_cast<int>(sizes.size()); ++t) {
    for (int64_t b = 0; b < sizes[t]; b += kChunk) {
      chunks.push_back({t, b, std::min(sizes[t], b + kChunk)});
    }
  }
  return chunks;
}

struct ChunkRun {
  std::atomic<int64_t> next{0};
  int64_t total = 0;
  std::mutex mu;
  std::condition_variable idle;
  int running = 0;
  bool closed = false;
  const std::function<void(int64_t)>* fn = nullptr;
};

inline void DrainChunks(ChunkRun* run) {
  for (int64_t c = run->next.fetch_add(1); c < run->total;
       c = run->next.fetch_add(1)) {
    (*run->fn)(c);
  }
}

// ForEachChunk runs fn(chunk index) for every chunk, on the calling thread and
// NumThreads() - 1 helpers from the intra-op pool, so exactly as many
// threads work as the pool has, whether or not the caller is one of the
// pool's threads. Each thread takes the next chunk from a shared counter, so
// a thread the OS deschedules leaves its share to the others. A helper that
// starts after the caller ran out of chunks does nothing, and the caller
// waits only for helpers already working, so a busy pool never blocks it.
//
// (The first version used TF's adaptive ParallelFor. Measured alone on the
// resnet50 set on a quiet machine: the Momentum apply took 26.3 ms with it
// and 24.9 ms with this split; a 2-thread C++ loop over arrays of the same
// size outside TF takes 18.2 ms. What costs the rest inside TF is not yet
// found.)
inline void ForEachChunk(OpKernelContext* ctx, int64_t num_chunks,
                         const std::function<void(int64_t)>& fn) {
  if (num_chunks == 0) return;
  auto* pool = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  const int64_t helpers =
      std::min<int64_t>(pool->NumThreads() - 1, num_chunks - 1);
  if (helpers <= 0) {
    for (int64_t c = 0; c < num_chunks; ++c) fn(c);
    return;
  }
  auto run = std::make_shared<ChunkRun>();
  run->total = num_chunks;
  run->fn = &fn;
  for (int64_t h = 0; h < helpers; ++h) {
    pool->Schedule([run]() {
      {
        std::lock_guard<std::mutex> lock(run->mu);
        if (run->closed) return;
        ++run->running;
      }
      DrainChunks(run.get());
      std::lock_guard<std::mutex> lock(run->mu);
      if (--run->running == 0) run->idle.notify_all();
    });
  }
  DrainChunks(run.get());
  std::unique_lock<std::mutex> lock(run->mu);
  run->closed = true;
  run->idle.wait(lock, [&run]() { return run->running == 0; });
}

// ForEachChunk in reverse chunk order: fn(num_chunks - 1), ..., fn(0) (as
// the shared counter hands them out). A pass that follows a forward read
// pass over the same arrays (the gradient norm before an apply, the finite
// check before an accumulate) starts with the chunks that pass read last,
// which are still in the last-level cache, instead of the first ones, which
// were evicted: the tail of the second read of g comes from cache. Every
// chunk is independent, so the order changes no value.
inline void ForEachChunkReversed(OpKernelContext* ctx, int64_t num_chunks,
                                 const std::function<void(int64_t)>& fn) {
  ForEachChunk(ctx, num_chunks,
               [&fn, num_chunks](int64_t c) { fn(num_chunks - 1 - c); });
}

// sum(x[i]^2) over [0, n): float lanes over blocks of 1024, blocks in
// double (the order of multi_tensor_ops.cc's SumSquares, bit for bit).
inline double SumSquares(const float* x, int64_t n) {
  double total = 0.0;
  for (int64_t b = 0; b < n; b += 1024) {
    const int64_t e = std::min(n, b + 1024);
    float lanes[16] = {0.f};
    int64_t i = b;
    for (; i + 16 <= e; i += 16) {
      for (int j = 0; j < 16; ++j) lanes[j] += x[i + j] * x[i + j];
    }
    float s = 0.f;
    for (int j = 0; j < 16; ++j) s += lanes[j];
    for (; i < e; ++i) s += x[i] * x[i];
    total += s;
  }
  return total;
}

// sum over tensors (in order) of half their chunk sums (in chunk order): the
// total TfLearnerMultiSumSquares gives for the same tensors.
inline double CombineHalves(const std::vector<Chunk>& chunks,
                            const std::vector<double>& partial,
                            int num_tensors) {
  std::vector<double> half(num_tensors, 0.0);
  for (size_t c = 0; c < chunks.size(); ++c) {
    half[chunks[c].tensor] += partial[c];
  }
  double sum = 0.0;
  for (double h : half) sum += h * 0.5;
  return sum;
}

// The float32 tensors of resource inputs `inputs`, locked exclusively (in a
// global order) and safe to update in place.
class LockedVariables {
 public:
  LockedVariables(OpKernelContext* ctx, const std::vector<int>& inputs)
      : locks_(tensorflow::MaybeLockVariableInputMutexesInOrder<CPUDevice,
                                                                 float>(
            ctx, /*do_lock=*/true, /*sparse=*/false, inputs)) {
    tensors_.resize(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      OP_REQUIRES_OK(ctx,
                     tensorflow::GetInputTensorFromVariable<CPUDevice, float>(
                         ctx, inputs[i], /*lock_held=*/true, /*sparse=*/false,
                         &tensors_[i]));
      OP_REQUIRES(ctx, tensors_[i].IsInitialized(),
                  tensorflow::errors::FailedPrecondition(
                      "Attempting to use an uninitialized variable: input ",
                      inputs[i]));
    }
  }

  float* data(int i) { return tensors_[i].flat<float>().data(); }
  const Tensor& tensor(int i) const { return tensors_[i]; }

 private:
  tensorflow::VariableInputLockHolder locks_;
  std::vector<Tensor> tensors_;
};

// OK if each of the `groups` groups of n locked variables has, at every
// index i, the shape of gradient i (input grads_first + i). Else fails ctx
// with InvalidArgument naming the tensor (and, with name_group, its group:
// 0 the variables, s the s-th slot group) and returns false.
inline bool SameShapes(OpKernelContext* ctx, const LockedVariables& vars,
                       int groups, int n, int grads_first, bool name_group) {
  for (int i = 0; i < n; ++i) {
    const Tensor& g = ctx->input(grads_first + i);
    for (int s = 0; s < groups; ++s) {
      const Tensor& v = vars.tensor(s * n + i);
      if (v.shape().IsSameSize(g.shape())) continue;
      if (name_group) {
        ctx->CtxFailure(tensorflow::errors::InvalidArgument(
            "tensor ", i, " (slot group ", s, "): shape ",
            v.shape().DebugString(), " != gradient shape ",
            g.shape().DebugString()));
      } else {
        ctx->CtxFailure(tensorflow::errors::InvalidArgument(
            "tensor ", i, ": variable shape ", v.shape().DebugString(),
            " != gradient shape ", g.shape().DebugString()));
      }
      return false;
    }
  }
  return true;
}

// Reads an op's scalar inputs in order from input `first` on:
// Read(&a, &b, &c) reads the next three. A float* takes a float32 scalar,
// a bool* a bool one (the op registration fixes the dtypes).
class ScalarInputs {
 public:
  ScalarInputs(OpKernelContext* ctx, int first) : ctx_(ctx), next_(first) {}

  template <typename... T>
  void Read(T*... out) {
    (ReadOne(out), ...);  // Left to right: the order of the inputs.
  }

 private:
  void ReadOne(float* out) { *out = ctx_->input(next_++).scalar<float>()(); }
  void ReadOne(bool* out) { *out = ctx_->input(next_++).scalar<bool>()(); }
  // A const Tensor** takes the input itself (a vector: one value per
  // tensor, RuleBase::kPerTensor).
  void ReadOne(const Tensor** out) { *out = &ctx_->input(next_++); }

  OpKernelContext* ctx_;
  int next_;
};

// Calls fn(std::integral_constant<bool, f>{}...) with one constant per
// flag, in order: WithFlags(fn, scale, decay) calls
// fn(std::true_type{}, std::false_type{}) when scale and not decay. The
// callee passes the constants on as template arguments
// (Loop<decltype(s)::value, ...>), so each combination gets its own loop
// without a branch inside. A flag given as a run-time bool compiles both
// loops; one given as a constant (std::false_type, see FlagIf) only its own.
template <typename Fn>
inline void WithFlags(Fn&& fn);
template <typename Fn, typename... Rest>
inline void WithFlags(Fn&& fn, bool first, Rest... rest);
template <typename Fn, bool kFirst, typename... Rest>
inline void WithFlags(Fn&& fn, std::integral_constant<bool, kFirst> first,
                      Rest... rest);

template <typename Fn>
inline void WithFlags(Fn&& fn) {
  fn();
}

template <typename Fn, typename... Rest>
inline void WithFlags(Fn&& fn, bool first, Rest... rest) {
  if (first) {
    WithFlags([&fn](auto... known) { fn(std::true_type{}, known...); },
              rest...);
  } else {
    WithFlags([&fn](auto... known) { fn(std::false_type{}, known...); },
              rest...);
  }
}

template <typename Fn, bool kFirst, typename... Rest>
inline void WithFlags(Fn&& fn, std::integral_constant<bool, kFirst> first,
                      Rest... rest) {
  WithFlags([&fn, first](auto... known) { fn(first, known...); }, rest...);
}

// `value` if kUsed, else the constant false (WithFlags then compiles no
// loop for true): for a flag an op does not have.
template <bool kUsed>
inline auto FlagIf(bool value) {
  if constexpr (kUsed) {
    return value;
  } else {
    return std::false_type{};
  }
}

// ---- The apply ops: one skeleton, a rule per op ----------------------------
//
// MultiApplyOp<R> is the whole op but the rule's arithmetic. Inputs: N
// variables, R::kSlots slot groups of N, N gradients, then R's scalars.
// Attrs: N, decay (one bool per variable), measure_weights, scale_grad (if
// R::kScaleGrad) and R::kFlagAttr (if not null). Output 0: sum(w_old^2) / 2
// over the variables when measure_weights (each chunk summed just before its
// update, from cache), else 0.
//
// Per element, in this order: g = g * factor (scale_grad); w1 = R's Step;
// then, for a variable whose decay entry is true, w1 = w1 - wd * w_old
// (R::kDecayInStep: the rule decays inside its step instead).
//
// A rule R derives from RuleBase and has:
//   kSlots                how many slot groups follow the variables
//                         (at most kMaxSlots);
//   R(ScalarInputs* in)   reads the scalar inputs after the gradients, in
//                         their registration order, including `factor`
//                         (grad_factor) and `wd` (the decay rate) where the
//                         op takes them;
//   float Step(int64_t i, float w_old, float g, float* s...) const
//                         w's new value before decay, given element i of
//                         the scaled gradient; reads and writes element i
//                         of its slots s... (one pointer per slot group, in
//                         input order). A rule with kHasFlag or
//                         kDecayInStep declares it
//                         template <bool kFlag, bool kDecay>.
//   kPerTensor            (optional) the rule has values per tensor (Muon's
//                         rates): Check(ctx, N) validates them once, and
//                         before each chunk of tensor t a copy of the rule
//                         is given ForTensor(t).
// Errors (InvalidArgument): decay without N entries (at construction); a
// variable or slot whose shape is not its gradient's (in Compute, before
// any element is written).

// What a rule has unless it says otherwise.
struct RuleBase {
  // The op has attr scale_grad and an input grad_factor (read into factor).
  static constexpr bool kScaleGrad = true;
  // The name of a bool attr that becomes `flag` (e.g. "use_nesterov").
  static constexpr const char* kFlagAttr = nullptr;
  // Step takes `flag` as its template argument kFlag.
  static constexpr bool kHasFlag = false;
  // Step applies the decay itself (template argument kDecay) with `wd`.
  static constexpr bool kDecayInStep = false;
  // The rule's values differ per tensor: see ForTensor.
  static constexpr bool kPerTensor = false;

  // OK, or fails ctx (InvalidArgument) and returns false: a per-tensor
  // input that has not one value per tensor (n tensors).
  bool Check(OpKernelContext*, int) const { return true; }
  // Sets the values of tensor t (kPerTensor rules; here nothing).
  void ForTensor(int) {}

  float factor = 1.f;
  float wd = 0.f;
  bool flag = false;
};

template <bool kFlag, bool kDecay, typename Rule, typename... Args>
inline float StepOf(const Rule& rule, Args... args) {
  if constexpr (Rule::kHasFlag || Rule::kDecayInStep) {
    return rule.template Step<kFlag, kDecay>(args...);
  } else {
    return rule.Step(args...);
  }
}

template <std::size_t>
using SlotPtr = float* __restrict__;

// The loop over n elements of one chunk. The rule is copied so its scalars
// are locals the writes through the pointers cannot change (they stay in
// registers); every flag is a template argument, so the loop is
// branch-free and vectorizes. Not inlined: inlined into the chunk lambda,
// g++ 12 lost the __restrict__ of the pointers for Adam's loops and
// vectorized them behind a run-time overlap check (-fopt-info-vec); as a
// call (one per chunk) all 42 apply loops vectorize without one.
template <bool kScale, bool kDecay, bool kFlag, typename Rule,
          std::size_t... S>
__attribute__((noinline)) void Loop(const Rule& rule, float* __restrict__ w,
                                    const float* __restrict__ g, int64_t n,
                                    std::index_sequence<S...>,
                                    SlotPtr<S>... slots) {
  const Rule r = rule;
  const float f = r.factor, wd = r.wd;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = kScale ? g[i] * f : g[i];
    const float w0 = w[i];
    float w1 = StepOf<kFlag, kDecay>(r, i, w0, gi, slots...);
    if (kDecay && !Rule::kDecayInStep) w1 = w1 - wd * w0;
    w[i] = w1;
  }
}

template <typename Rule>
class MultiApplyOp : public OpKernel {
 public:
  static_assert(Rule::kSlots <= kMaxSlots, "raise kMaxSlots");

  explicit MultiApplyOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("N", &n_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("decay", &decay_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("measure_weights", &measure_));
    if (Rule::kScaleGrad) {
      OP_REQUIRES_OK(ctx, ctx->GetAttr("scale_grad", &scale_grad_));
    }
    OP_REQUIRES(ctx, static_cast<int>(decay_.size()) == n_,
                tensorflow::errors::InvalidArgument(
                    "decay has ", decay_.size(), " entries, expected N=", n_));
    if (Rule::kFlagAttr != nullptr) {
      OP_REQUIRES_OK(ctx, ctx->GetAttr(Rule::kFlagAttr, &attr_flag_));
    }
  }

  void Compute(OpKernelContext* ctx) override {
    constexpr int kGroups = 1 + Rule::kSlots;
    std::vector<int> inputs(n_ * kGroups);
    for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = i;
    LockedVariables vars(ctx, inputs);
    if (!ctx->status().ok()) return;
    const int grads_first = n_ * kGroups;
    if (!SameShapes(ctx, vars, kGroups, n_, grads_first, true)) return;
    std::vector<int64_t> sizes(n_);
    for (int i = 0; i < n_; ++i) {
      sizes[i] = ctx->input(grads_first + i).NumElements();
    }
    ScalarInputs in(ctx, grads_first + n_);
    Rule rule(&in);
    if (!rule.Check(ctx, n_)) return;
    if (Rule::kFlagAttr != nullptr) rule.flag = attr_flag_;
    Tensor* measured = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, {}, &measured));
    const std::vector<Chunk> chunks = MakeChunks(sizes);
    std::vector<double> partial(measure_ ? chunks.size() : 0, 0.0);
    // Reversed: the gradient norm op read g forward just before.
    ForEachChunkReversed(ctx, chunks.size(), [&](int64_t c) {
      const Chunk& k = chunks[c];
      const int64_t len = k.end - k.begin;
      float* slots[kMaxSlots] = {};
      for (int s = 0; s < Rule::kSlots; ++s) {
        slots[s] = vars.data((s + 1) * n_ + k.tensor) + k.begin;
      }
      const float* g =
          ctx->input(grads_first + k.tensor).flat<float>().data() + k.begin;
      float* w = vars.data(k.tensor) + k.begin;
      if (measure_) partial[c] = SumSquares(w, len);
      Rule r = rule;  // Loop copies it anyway; per tensor if kPerTensor.
      if (Rule::kPerTensor) r.ForTensor(k.tensor);
      RunChunk(r, w, g, len, slots, static_cast<bool>(decay_[k.tensor]),
               std::make_index_sequence<Rule::kSlots>{});
    });
    measured->scalar<float>()() =
        measure_ ? static_cast<float>(CombineHalves(chunks, partial, n_))
                 : 0.f;
  }

 private:
  template <std::size_t... S>
  void RunChunk(const Rule& rule, float* w, const float* g, int64_t n,
                float* const* slots, bool decay,
                std::index_sequence<S...> seq) const {
    WithFlags(
        [&](auto s, auto d, auto f) {
          Loop<decltype(s)::value, decltype(d)::value, decltype(f)::value>(
              rule, w, g, n, seq, slots[S]...);
        },
        FlagIf<Rule::kScaleGrad>(scale_grad_), decay,
        FlagIf<Rule::kHasFlag>(rule.flag));
  }

  int n_ = 0;
  bool measure_ = false;
  bool scale_grad_ = false;
  bool attr_flag_ = false;
  std::vector<bool> decay_;
};

}  // namespace common
}  // namespace tf_learner

#endif  // TF_LEARNER_MULTI_TENSOR_COMMON_H_
