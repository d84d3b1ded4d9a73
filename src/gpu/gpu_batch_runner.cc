#include "gpu/gpu_batch_runner.h"

#include <map>
#include <set>

#include "lowbit/error.h"
#include "models/model.h"

namespace lowbit::gpu {

namespace {

class GpuBatchRunner : public models::BatchRunner {
 public:
  explicit GpuBatchRunner(std::unique_ptr<GpuModel> model) : model_(std::move(model)) {}

  int64_t capacity_tokens() const override { return model_->options().kv_cache_tokens; }

  std::string describe() const override {
    return "cuda: " + model_->device_name() + ", " + std::to_string(capacity_tokens()) +
           " tokens of KV cache (" + std::to_string(model_->kv_cache_device_bytes() >> 20) + " MiB)";
  }

  std::vector<Tensor> run(std::span<const models::BatchEntry> batch) override {
    // Sequences of this step; the others have left the running set: their GPU blocks go back.
    std::set<const models::PagedSequence*> present;
    for (const models::BatchEntry& e : batch) present.insert(e.seq);
    for (auto it = sequences_.begin(); it != sequences_.end();) {
      it = present.count(it->first) ? std::next(it) : sequences_.erase(it);
    }
    std::vector<GpuModel::BatchItem> items;
    for (const models::BatchEntry& e : batch) {
      auto [it, added] = sequences_.try_emplace(e.seq);
      if (added) it->second = model_->new_sequence();
      GpuSequence& seq = it->second;
      // The engine recomputes a preempted sequence from its (lower) length.
      if (seq.length() > e.seq->length) seq.truncate(e.seq->length);
      LOWBIT_CHECK_AS(Internal, seq.length() == e.seq->length,
                      "GPU batch runner: the engine says " + std::to_string(e.seq->length) +
                          " tokens are cached, the GPU holds " + std::to_string(seq.length()));
      items.push_back({e.tokens, &seq, e.all_logits, e.argmax_only});
    }
    std::vector<Tensor> logits(batch.size());
    run_in_groups(items, logits);
    for (const models::BatchEntry& e : batch) e.seq->length += static_cast<int64_t>(e.tokens.size());
    return logits;
  }

 private:
  // forward_batch over groups of items that fit max_step_tokens and max_batch_size; an item that
  // alone exceeds max_step_tokens runs through forward().
  void run_in_groups(const std::vector<GpuModel::BatchItem>& items, std::vector<Tensor>& logits) {
    const GpuModelOptions& o = model_->options();
    std::vector<GpuModel::BatchItem> group;
    std::vector<size_t> index;
    int64_t rows = 0;
    auto flush = [&] {
      if (group.empty()) return;
      std::vector<Tensor> out = model_->forward_batch(group);
      for (size_t j = 0; j < group.size(); ++j) logits[index[j]] = std::move(out[j]);
      group.clear();
      index.clear();
      rows = 0;
    };
    for (size_t i = 0; i < items.size(); ++i) {
      const auto n = static_cast<int64_t>(items[i].tokens.size());
      if (n > o.max_step_tokens) {
        logits[i] = model_->forward(items[i].tokens, *items[i].sequence, items[i].all_logits);
        continue;
      }
      if (rows + n > o.max_step_tokens || static_cast<int64_t>(group.size()) == o.max_batch_size) flush();
      group.push_back(items[i]);
      index.push_back(i);
      rows += n;
    }
    flush();
  }

  std::unique_ptr<GpuModel> model_;
  std::map<const models::PagedSequence*, GpuSequence> sequences_;
};

}  // namespace

std::unique_ptr<models::BatchRunner> make_gpu_batch_runner(std::unique_ptr<GpuModel> model) {
  return std::make_unique<GpuBatchRunner>(std::move(model));
}

}  // namespace lowbit::gpu
