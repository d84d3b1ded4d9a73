// GpuModel::forward_batch: several sequences' new tokens stacked into one pass (continuous
// batching). Every linear layer runs all rows in one call; attention runs per sequence from the
// batch's metadata (decode kernel when each sequence has one new token, the varlen prefill kernel
// otherwise); the LM head runs on the rows whose logits are wanted, gathered into one block.
// Eager (no CUDA graphs: the graphs of forward() are per single-sequence decode).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "gpu/gpu_impl.h"
#include "gpu/gpu_kernels.h"
#include "gpu/gpu_pass.h"
#include "kernels/cuda/cuda_check.h"
#include "lowbit/error.h"
#include "models/model.h"

namespace lowbit::gpu {

namespace kc = kernels::cuda;

namespace {

// One item as a shard sees it: its cache state, new tokens and first position.
struct ItemView {
  const GpuSequence::State* seq = nullptr;
  std::span<const int32_t> tokens;
  int64_t past = 0;
  bool all_logits = false;
  bool argmax_only = false;
  float* out = nullptr;  // host logits [rows wanted, vocab] (null when argmax_only)
};

// One GPU's greedy choice for an argmax_only item: its best id (global) and logit.
struct RankArgmax {
  int32_t id = 0;
  float value = 0.0f;
};

// Metadata of the batch: ids, positions, slots [T each], context lengths [B], query starts
// [B + 1], last rows [B], block tables [B, max_blocks_per_seq]; uploaded once.
Pass fill_batch_meta(Shard& im, std::span<const ItemView> items, int64_t rows,
                     const int32_t*& last_rows) {
  const int bs = im.options.block_size;
  const auto b = static_cast<int64_t>(items.size());
  // Block tables as wide as the longest sequence's, not max_seq_len's (less to upload per step).
  int64_t mb = 1;
  for (const ItemView& it : items) mb = std::max(mb, static_cast<int64_t>(it.seq->blocks.size()));
  int32_t* h = im.meta_host.data();
  int32_t* ids = h;
  int32_t* positions = h + rows;
  int32_t* slots = h + 2 * rows;
  int32_t* context = h + 3 * rows;
  int32_t* query_start = context + b;
  int32_t* last = query_start + b + 1;
  int32_t* tables = last + b;
  Pass p;
  p.rows = rows;
  p.num_seqs = b;
  p.block_stride = mb;
  int64_t row = 0;
  for (int64_t s = 0; s < b; ++s) {
    const ItemView& it = items[static_cast<size_t>(s)];
    const auto n = static_cast<int64_t>(it.tokens.size());
    query_start[s] = static_cast<int32_t>(row);
    for (int64_t i = 0; i < n; ++i, ++row) {
      const int64_t pos = it.past + i;
      ids[row] = it.tokens[static_cast<size_t>(i)];
      positions[row] = static_cast<int32_t>(pos);
      slots[row] = it.seq->blocks[static_cast<size_t>(pos / bs)] * bs + static_cast<int32_t>(pos % bs);
    }
    context[s] = static_cast<int32_t>(it.past + n);
    last[s] = static_cast<int32_t>(row - 1);
    std::fill_n(tables + s * mb, mb, 0);
    std::copy(it.seq->blocks.begin(), it.seq->blocks.end(), tables + s * mb);
    p.max_query = std::max(p.max_query, n);
    p.max_context = std::max(p.max_context, it.past + n);
  }
  query_start[b] = static_cast<int32_t>(rows);
  const size_t count = static_cast<size_t>(3 * rows + 3 * b + 1 + b * mb);
  LOWBIT_CUDA_CHECK(cudaMemcpyAsync(im.meta.data(), h, count * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, im.stream));
  const int32_t* d = im.meta.data();
  p.ids = d;
  p.positions = d + rows;
  p.slots = d + 2 * rows;
  p.context_len = d + 3 * rows;
  p.query_start = p.context_len + b;
  last_rows = p.query_start + b + 1;
  p.block_table = last_rows + b;
  p.rope = im.rope_table.data();
  p.rope_rows = im.options.max_seq_len;
  return p;
}

// Decode attention scratch for b sequences (grown, never shrunk; graphs do not use it).
void ensure_batch_workspace(Shard& im, Pass& p) {
  if (p.rows != p.num_seqs || p.num_seqs == 1) return;
  size_t need = 0;
  for (const GpuLayer& g : im.layers) {
    kernels::AttentionShape s;
    s.heads = static_cast<int>(im.heads);
    s.kv_heads = static_cast<int>(im.kv_heads);
    s.head_dim = static_cast<int>(im.head_dim);
    s.window = g.window;
    s.scale = im.attention_scale;
    need = std::max(need, kc::decode_attention_workspace_bytes(s, static_cast<int>(p.num_seqs),
                                                               static_cast<int>(p.max_context)));
  }
  if (need > im.batch_attn_workspace.bytes()) {
    LOWBIT_CUDA_CHECK(cudaStreamSynchronize(im.stream));  // the old buffer may still be in use
    im.batch_attn_workspace = kc::DeviceBuffer<uint8_t>(need);
  }
  p.attn_workspace = im.batch_attn_workspace.data();
  p.attn_workspace_bytes = im.batch_attn_workspace.bytes();
}

// `out` gets one entry per item (argmax_only items only are filled).
void forward_batch_shard(Shard& im, std::span<const ItemView> items, int64_t rows,
                         std::vector<RankArgmax>& out) {
  LOWBIT_CUDA_CHECK(cudaSetDevice(im.device));
  const int32_t* last_rows = nullptr;
  Pass p = fill_batch_meta(im, items, rows, last_rows);
  ensure_batch_workspace(im, p);
  run_layers(im, p);
  // Items that want every row: the LM head over their rows, in blocks.
  int64_t first_row = 0;
  for (const ItemView& it : items) {
    const auto n = static_cast<int64_t>(it.tokens.size());
    if (it.all_logits) {
      for (int64_t r = 0; r < n; r += im.logit_rows) {
        const int64_t block = std::min(im.logit_rows, n - r);
        im.lm_head.run_f32(*im.blas, im.buf_a.data() + (first_row + r) * im.hidden, block,
                           im.logits.data(), im.stream, im.workspace.data(), im.workspace.bytes());
        copy_logits(im, im.logits.data(), block, it.out + r * im.vocab);
      }
    }
    first_row += n;
  }
  // The others: their last rows gathered into buf_b (free after the layers), one LM head call per
  // block of logit_rows rows.
  std::vector<int64_t> wanted;
  for (size_t s = 0; s < items.size(); ++s) {
    if (!items[s].all_logits) wanted.push_back(static_cast<int64_t>(s));
  }
  for (size_t w = 0; w < wanted.size(); w += static_cast<size_t>(im.logit_rows)) {
    const size_t block = std::min(wanted.size() - w, static_cast<size_t>(im.logit_rows));
    // The last rows of items wanted[w .. w + block): one gather when every item is wanted (their
    // last-row indices are consecutive in the metadata), else one per row.
    if (wanted.size() == items.size()) {
      gather_rows_bf16(im.buf_a.data(), im.hidden, last_rows + w, static_cast<int64_t>(block),
                       im.buf_b.data(), im.stream);
    } else {
      for (size_t j = 0; j < block; ++j) {
        gather_rows_bf16(im.buf_a.data(), im.hidden, last_rows + wanted[w + j], 1,
                         im.buf_b.data() + j * static_cast<size_t>(im.hidden), im.stream);
      }
    }
    im.lm_head.run_f32(*im.blas, im.buf_b.data(), static_cast<int64_t>(block), im.logits.data(),
                       im.stream, im.workspace.data(), im.workspace.bytes());
    bool any_argmax = false;
    for (size_t j = 0; j < block; ++j) {
      const ItemView& it = items[static_cast<size_t>(wanted[w + j])];
      any_argmax = any_argmax || it.argmax_only;
      if (!it.argmax_only) {
        copy_logits(im, im.logits.data() + j * static_cast<size_t>(im.vocab_rows), 1, it.out);
      }
    }
    if (any_argmax) {  // the whole block (cheap); rows of other items are ignored below
      argmax_rows(im.logits.data(), static_cast<int64_t>(block), im.vocab_rows, im.vocab_rows,
                  im.argmax.data() + 2 * w, im.stream);
    }
  }
  const bool any_argmax = std::any_of(items.begin(), items.end(),
                                      [](const ItemView& it) { return it.argmax_only; });
  if (any_argmax) {
    LOWBIT_CUDA_CHECK(cudaMemcpyAsync(im.argmax_host.data(), im.argmax.data(),
                                      2 * wanted.size() * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                      im.stream));
  }
  LOWBIT_CUDA_CHECK(cudaStreamSynchronize(im.stream));
  for (size_t w = 0; w < wanted.size(); ++w) {
    const auto s = static_cast<size_t>(wanted[w]);
    if (!items[s].argmax_only) continue;
    const int32_t* r = im.argmax_host.data() + 2 * w;
    float value;
    std::memcpy(&value, &r[1], sizeof value);
    out[s] = RankArgmax{static_cast<int32_t>(im.vocab_begin) + r[0], value};
  }
}

// The ranks' choices combined: the largest logit, the lowest id on a tie (ranks hold ascending
// vocabulary ranges, each already the lowest of its own ties); NaN never wins.
int32_t combine_argmax(const std::vector<std::vector<RankArgmax>>& per_rank, size_t item) {
  const RankArgmax* best = nullptr;
  for (const std::vector<RankArgmax>& rank : per_rank) {
    const RankArgmax& c = rank[item];
    if (best == nullptr || c.value > best->value || (std::isnan(best->value) && !std::isnan(c.value))) {
      best = &c;
    }
  }
  return best->id;
}

}  // namespace

std::vector<Tensor> GpuModel::forward_batch(std::span<const BatchItem> items) {
  Impl& im = *impl_;
  const Shard& first = *im.shards.front();
  LOWBIT_CHECK(!items.empty(), "forward_batch: no items");
  LOWBIT_CHECK(static_cast<int64_t>(items.size()) <= im.options.max_batch_size,
               "forward_batch: " + std::to_string(items.size()) + " sequences exceed max_batch_size " +
                   std::to_string(im.options.max_batch_size));
  int64_t rows = 0;
  std::set<const GpuSequence*> seen;
  bool call_rope = false;
  models::RopeFrequencies scratch, initial;
  const models::RopeFrequencies& base = im.cpu->rotary().frequencies(0, initial);
  for (size_t i = 0; i < items.size(); ++i) {
    const BatchItem& it = items[i];
    const std::string at = "forward_batch: item " + std::to_string(i) + ": ";
    LOWBIT_CHECK(it.sequence != nullptr && it.sequence->state_ && it.sequence->state_->pool == im.pool,
                 at + "the sequence was not made by this GpuModel's new_sequence()");
    LOWBIT_CHECK(seen.insert(it.sequence).second, at + "the same sequence appears twice");
    check_tokens(it.tokens, first.vocab);
    const int64_t end = it.sequence->length() + static_cast<int64_t>(it.tokens.size());
    LOWBIT_CHECK(end <= im.options.max_seq_len,
                 at + std::to_string(end) + " tokens exceed max_seq_len " +
                     std::to_string(im.options.max_seq_len));
    call_rope = call_rope || &im.cpu->rotary().frequencies(end, scratch) != &base;
    rows += static_cast<int64_t>(it.tokens.size());
  }
  std::vector<Tensor> logits;
  if (call_rope) {  // per-call RoPE frequencies: one call per item, as forward() does
    for (const BatchItem& it : items) {
      Tensor t = forward(it.tokens, *it.sequence, it.all_logits);
      if (it.argmax_only && !it.all_logits) {  // same contract: the id (first maximal, as the host)
        const float* row = t.data_as<const float>();
        Tensor id = Tensor::zeros(DType::I32, {1});
        id.data_as<int32_t>()[0] = static_cast<int32_t>(std::max_element(row, row + first.vocab) - row);
        t = std::move(id);
      }
      logits.push_back(std::move(t));
    }
    return logits;
  }
  LOWBIT_CHECK(rows <= im.options.max_step_tokens,
               "forward_batch: " + std::to_string(rows) + " new tokens exceed max_step_tokens " +
                   std::to_string(im.options.max_step_tokens));
  std::vector<ItemView> views;
  std::vector<int64_t> pasts;
  size_t reserved = 0;
  try {
    for (; reserved < items.size(); ++reserved) {
      const BatchItem& it = items[reserved];
      GpuSequence::State& seq = *it.sequence->state_;
      pasts.push_back(seq.length);
      reserve_blocks(seq, seq.length + static_cast<int64_t>(it.tokens.size()));
    }
    for (size_t i = 0; i < items.size(); ++i) {
      const BatchItem& it = items[i];
      const auto n = static_cast<int64_t>(it.tokens.size());
      const bool argmax_only = it.argmax_only && !it.all_logits;
      logits.push_back(argmax_only ? Tensor::zeros(DType::I32, {1})
                                   : Tensor::zeros(DType::F32, {it.all_logits ? n : 1, first.vocab}));
      views.push_back({it.sequence->state_.get(), it.tokens, pasts[i], it.all_logits, argmax_only,
                       argmax_only ? nullptr : logits.back().data_as<float>()});
    }
    std::vector<std::vector<RankArgmax>> argmax(im.shards.size(),
                                                std::vector<RankArgmax>(items.size()));
    run_per_rank(static_cast<int>(im.shards.size()), [&](int r) {
      forward_batch_shard(*im.shards[static_cast<size_t>(r)], views, rows,
                          argmax[static_cast<size_t>(r)]);
    });
    for (size_t i = 0; i < items.size(); ++i) {
      if (views[i].argmax_only) logits[i].data_as<int32_t>()[0] = combine_argmax(argmax, i);
    }
  } catch (...) {
    for (size_t i = 0; i < std::min(reserved + 1, items.size()) && i < pasts.size(); ++i) {
      items[i].sequence->state_->release_blocks_after(pasts[i]);
    }
    throw;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].sequence->state_->length = pasts[i] + static_cast<int64_t>(items[i].tokens.size());
  }
  return logits;
}

}  // namespace lowbit::gpu
