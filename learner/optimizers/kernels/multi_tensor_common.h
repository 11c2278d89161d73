// What the multi-tensor apply ops of multi_tensor_ops.cc and
// multi_tensor_rules.cc share: the chunk split over threads, the locked
// variables, the in-pass weight measure, the base class for "N variables,
// S slot groups, N gradients, scalars" (MultiApplyBase) and the dispatch of
// run-time flags to template arguments (WithFlags).
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
constexpr int kMaxSlots = 4;

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

inline float Scalar(OpKernelContext* ctx, int input) {
  return ctx->input(input).scalar<float>()();
}

// Calls fn(std::integral_constant<bool, f>{}...) with one constant per
// run-time flag, in order: WithFlags(fn, scale, decay) calls
// fn(std::true_type{}, std::false_type{}) when scale and not decay. The
// callee passes the constants on as template arguments
// (Run<decltype(s)::value, ...>), so each combination gets its own loop
// without a branch inside (2^flags loops are compiled).
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

// Base of the apply ops: N variables, `num_slots` slot groups of N, N
// gradients, then scalar inputs. Attrs: N, decay (one bool per variable),
// measure_weights and, if `has_scale_grad`, scale_grad (an op registered
// without that attr passes false; scale_grad() is then false). Output 0:
// sum(w_old^2) / 2 when measured, else 0.
// Errors (InvalidArgument): decay without N entries (at construction); a
// variable or slot whose shape is not its gradient's (in Compute, before
// any element is written).
class MultiApplyBase : public OpKernel {
 public:
  MultiApplyBase(OpKernelConstruction* ctx, int num_slots, bool has_scale_grad)
      : OpKernel(ctx), num_slots_(num_slots) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("N", &n_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("decay", &decay_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("measure_weights", &measure_));
    if (has_scale_grad) {
      OP_REQUIRES_OK(ctx, ctx->GetAttr("scale_grad", &scale_grad_));
    }
    OP_REQUIRES(ctx, static_cast<int>(decay_.size()) == n_,
                tensorflow::errors::InvalidArgument(
                    "decay has ", decay_.size(), " entries, expected N=", n_));
  }

  void Compute(OpKernelContext* ctx) override {
    std::vector<int> inputs(n_ * (1 + num_slots_));
    for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = i;
    LockedVariables vars(ctx, inputs);
    if (!ctx->status().ok()) return;
    std::vector<int64_t> sizes(n_);
    for (int i = 0; i < n_; ++i) {
      const Tensor& g = ctx->input(grads_first() + i);
      sizes[i] = g.NumElements();
      for (int s = 0; s <= num_slots_; ++s) {
        OP_REQUIRES(ctx, vars.tensor(s * n_ + i).shape().IsSameSize(g.shape()),
                    tensorflow::errors::InvalidArgument(
                        "tensor ", i, " (slot group ", s, "): shape ",
                        vars.tensor(s * n_ + i).shape().DebugString(),
                        " != gradient shape ", g.shape().DebugString()));
      }
    }
    Prepare(ctx);
    if (!ctx->status().ok()) return;
    Tensor* measured = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, {}, &measured));
    const std::vector<Chunk> chunks = MakeChunks(sizes);
    // With measure_weights, each chunk of w is summed just before its
    // update, which then reads w from cache: the weights' norm (before the
    // update) costs no memory pass of its own.
    // Reversed: the gradient norm op read g forward just before.
    std::vector<double> partial(measure_ ? chunks.size() : 0, 0.0);
    ForEachChunkReversed(ctx, chunks.size(), [&](int64_t c) {
      const Chunk& k = chunks[c];
      float* slots[kMaxSlots] = {nullptr, nullptr, nullptr, nullptr};
      for (int s = 0; s < num_slots_; ++s) {
        slots[s] = vars.data((s + 1) * n_ + k.tensor) + k.begin;
      }
      const float* g =
          ctx->input(grads_first() + k.tensor).flat<float>().data() + k.begin;
      float* w = vars.data(k.tensor) + k.begin;
      if (measure_) partial[c] = SumSquares(w, k.end - k.begin);
      Update(w, slots, g, k.end - k.begin, decay_[k.tensor]);
    });
    measured->scalar<float>()() =
        measure_ ? static_cast<float>(CombineHalves(chunks, partial, n_))
                 : 0.f;
  }

 protected:
  int scalars_first() const { return n_ * (2 + num_slots_); }
  bool scale_grad() const { return scale_grad_; }
  // Reads the scalar inputs (after the variables are locked).
  virtual void Prepare(OpKernelContext* ctx) = 0;
  // Updates `n` elements of one variable and its slots in place.
  virtual void Update(float* w, float* const* slots, const float* g,
                      int64_t n, bool decay) const = 0;

 private:
  int grads_first() const { return n_ * (1 + num_slots_); }

  int n_ = 0;
  int num_slots_;
  bool measure_ = false;
  bool scale_grad_ = false;
  std::vector<bool> decay_;
};

}  // namespace common
}  // namespace tf_learner

#endif  // TF_LEARNER_MULTI_TENSOR_COMMON_H_
