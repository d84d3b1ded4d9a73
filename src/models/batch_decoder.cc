// forward_batch(): the decoder forward pass of decoder.cc over several sequences at once, their
// keys and values in a KvBlockPool (paged_kv_cache.h).
//
// The new tokens of all entries are stacked into one activation matrix [M, hidden]. Row-wise ops
// (embedding, RMSNorm, RoPE, residual adds) run on all M rows at once: each computes a row from
// that row alone, so stacking changes nothing. Matmuls (q/k/v/o projections, MLP or MoE, LM head)
// run per row group (BatchOptions): rows of short entries share calls, long entries get their own,
// so that every row takes the kernel path Model::forward would give it. Attention runs per entry
// against its own blocks through kernels::attention_paged, which is bit-identical to the
// contiguous kernels::attention Model::forward calls. Entries longer than kChunkTokens run in the
// chunks decoder.cc uses, one round per chunk.
#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <string>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "lowbit/error.h"
#include "models/layers/attention.h"
#include "models/kv_cache_quant.h"
#include "models/layers/mlp.h"
#include "models/paged_kv_cache.h"
#include "quant/scheme/quant_args.h"

namespace lowbit::models {

namespace {

// decoder.cc's chunk length: an entry with more new tokens runs them in the same chunks.
constexpr int64_t kChunkTokens = 512;
// Entries with fewer queries take the kernel's direct attention loop, a small job each: those run
// side by side on the OpenMP threads. (Larger ones parallelize inside the kernel.)
constexpr int64_t kSmallAttentionQueries = 8;
constexpr int64_t kUnlimitedRows = std::numeric_limits<int64_t>::max();

// One entry's rows in one round: tokens [begin, begin + rows) of the entry.
struct Item {
  size_t entry = 0;
  int64_t begin = 0;
  int64_t rows = 0;
  int64_t first = 0;  // position of the first row (cached tokens before it)
  int64_t row0 = 0;   // first row in the stacked activation
};

// Consecutive rows that go through the same matmul calls.
struct RowGroup {
  int64_t row0 = 0;
  int64_t rows = 0;
};

// Rows whose logits are wanted: `rows` rows of the stacked activation from `src`, logits to `dst`.
struct HeadRows {
  int64_t src = 0;
  int64_t rows = 0;
  float* dst = nullptr;
};

// Scratch of one forward_batch call, per thread and only ever grown: decode steps allocate
// nothing but the returned logits.
struct Workspace {
  std::vector<int32_t> ids;                   // [M]
  std::vector<float> x;                       // residual stream [M, hidden]
  std::vector<float> normed;                  // [M, hidden]
  std::vector<float> branch;                  // attention / FFN output [M, hidden]
  std::vector<float> q;                       // [M, heads * head_dim]
  std::vector<float> k, v;                    // [M, kv_heads * head_dim]
  std::vector<uint8_t> k_codes, v_codes;      // fp8 cache layers: the codes of k, v
  std::vector<float> context;                 // attention output [M, heads * head_dim]
  std::vector<float> cos, sin;                // [M, rotary_dim / 2]
  std::vector<float> head_in, head_out;       // gathered rows for the LM head, their logits
  std::vector<RopeFrequencies> rope_scratch;  // per entry
  std::vector<const RopeFrequencies*> freq;   // per entry
  std::vector<Item> items;
  std::vector<RowGroup> groups, head_groups;
  std::vector<HeadRows> head_rows;
  std::vector<size_t> small_items;
  std::vector<const PagedSequence*> seen;
  MlpScratch mlp;
  MoeScratch moe;
};

Workspace& thread_workspace() {
  thread_local Workspace workspace;
  return workspace;
}

template <typename T>
void grow(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
}

// ---- validation ---------------------------------------------------------------------------------

void check_entry(const BatchEntry& e, size_t index, const ModelConfig& c, const KvBlockPool& pool) {
  // Built only on failure: a decode step allocates nothing here.
  auto where = [index] { return "forward_batch: entry " + std::to_string(index); };
  if (e.seq == nullptr) throw InvalidArgument(where() + " has no sequence");
  if (e.tokens.empty()) throw InvalidArgument(where() + " has no tokens to process");
  for (size_t i = 0; i < e.tokens.size(); ++i) {
    if (e.tokens[i] < 0 || e.tokens[i] >= c.vocab_size) {
      throw InvalidArgument(where() + ": token id " + std::to_string(e.tokens[i]) + " at index " +
                            std::to_string(i) + " is outside the vocabulary [0, " +
                            std::to_string(c.vocab_size) + ")");
    }
  }
  const PagedSequence& seq = *e.seq;
  const int64_t needed = seq.length + static_cast<int64_t>(e.tokens.size());
  const int64_t held = static_cast<int64_t>(seq.blocks.size());
  if (seq.length < 0 || held < pool.blocks_for(needed)) {
    throw InvalidArgument(where() + ": the sequence holds " + std::to_string(held) + " blocks of " +
                          std::to_string(pool.block_size()) + " positions but needs " +
                          std::to_string(needed) + " positions (length " +
                          std::to_string(seq.length) + " + " + std::to_string(e.tokens.size()) +
                          " new tokens)");
  }
  for (int64_t b = 0; b < pool.blocks_for(needed); ++b) {
    const int32_t id = seq.blocks[static_cast<size_t>(b)];
    if (id < 0 || id >= pool.num_blocks()) {
      throw InvalidArgument(where() + ": block table entry " + std::to_string(b) + " is block " +
                            std::to_string(id) + ", outside the pool of " +
                            std::to_string(pool.num_blocks()) + " blocks");
    }
  }
}

void check_batch(const Model& model, std::span<const BatchEntry> batch, const KvBlockPool& pool,
                 Workspace& ws) {
  const ModelConfig& c = model.config();
  if (batch.empty()) throw InvalidArgument("forward_batch: empty batch");
  if (pool.num_layers() != c.num_layers || pool.row_size() != c.num_kv_heads * c.head_dim) {
    throw InvalidArgument("forward_batch: the KV block pool (" + std::to_string(pool.num_layers()) +
                          " layers, rows of " + std::to_string(pool.row_size()) +
                          ") was not made for this model (" + std::to_string(c.num_layers) +
                          " layers, rows of " + std::to_string(c.num_kv_heads * c.head_dim) + ")");
  }
  const KvCacheQuantizer* quant = model.kv_cache_quantizer();
  for (int l = 0; l < pool.num_layers(); ++l) {
    if (pool.fp8(l) != (quant != nullptr && quant->quantizes(l))) {
      throw InvalidArgument("forward_batch: the KV block pool stores layer " + std::to_string(l) +
                            (pool.fp8(l) ? " in fp8" : " in fp32") +
                            ", the model's KV cache does not (a pool made for another model)");
    }
  }
  ws.seen.clear();
  for (size_t i = 0; i < batch.size(); ++i) {
    check_entry(batch[i], i, c, pool);
    ws.seen.push_back(batch[i].seq);
  }
  std::sort(ws.seen.begin(), ws.seen.end());
  if (std::adjacent_find(ws.seen.begin(), ws.seen.end()) != ws.seen.end()) {
    throw InvalidArgument("forward_batch: a sequence appears in more than one entry");
  }
}

// ---- row groups ---------------------------------------------------------------------------------

// Whether each row of `linear`'s output depends on that row of input alone (for one kernel path):
// dense layers, unless inputs are quantized dynamically with one scale per tensor. Methods are
// opaque (fp8_per_tensor quantizes inputs per tensor), so they count as not.
bool rows_independent(const Linear& linear) {
  if (linear.method) return false;
  return !linear.input_quant || linear.input_quant->rows_independent();
}

bool all_rows_independent(const DecoderWeights& w) {
  auto mlp_ok = [](const MlpWeights& m) {
    return rows_independent(m.gate) && rows_independent(m.up) && rows_independent(m.down);
  };
  for (const LayerWeights& layer : w.layers) {
    const AttentionWeights& a = layer.attention;
    if (!rows_independent(a.q) || !rows_independent(a.k) || !rows_independent(a.v) ||
        !rows_independent(a.o)) {
      return false;
    }
    if (layer.is_moe()) {
      if (!rows_independent(layer.moe.router)) return false;
      for (const MlpWeights& e : layer.moe.experts) {
        if (!mlp_ok(e)) return false;
      }
    } else if (!mlp_ok(layer.mlp)) {
      return false;
    }
  }
  return rows_independent(w.lm_head);
}

// Most rows one shared matmul call may take with every row computed as in a call of fewer rows:
// the streaming path's limit of kernels::matmul (kernels/cpu/matmul_dispatch.cc,
// streaming_max_rows; the streaming kernels give each output element the same accumulation
// whatever the other rows). 1 when rows are not independent: no shared calls at all.
int64_t exact_group_rows(const Model& model) {
  if (!all_rows_independent(model.weights())) return 1;
  switch (kernels::cpu::matmul_best_kernel()) {
    case kernels::cpu::MatmulKernel::AVX512:
      return 64;
    case kernels::cpu::MatmulKernel::AVX2:
      return 32;
    case kernels::cpu::MatmulKernel::SCALAR:
      return 4;
  }
  return 1;
}

// Appends `rows` rows starting at row0 to `groups`: into the last group while it stays within
// `cap` rows, else as a new group. Rows above `cap` always form their own group.
void add_to_groups(std::vector<RowGroup>& groups, int64_t row0, int64_t rows, int64_t cap) {
  if (rows <= cap && !groups.empty()) {
    RowGroup& last = groups.back();
    if (last.row0 + last.rows == row0 && last.rows <= cap - rows) {
      last.rows += rows;
      return;
    }
  }
  groups.push_back(RowGroup{row0, rows});
}

// The items of the round starting at token `begin` of each entry: entries with at most `cap`
// rows first (they share calls), then the others (each its own calls). Returns M.
int64_t plan_round(std::span<const BatchEntry> batch, int64_t begin, int64_t cap, Workspace& ws) {
  ws.items.clear();
  ws.groups.clear();
  int64_t row0 = 0;
  for (const bool shared : {true, false}) {
    for (size_t i = 0; i < batch.size(); ++i) {
      const int64_t n = static_cast<int64_t>(batch[i].tokens.size());
      if (n <= begin) continue;
      const int64_t rows = std::min(kChunkTokens, n - begin);
      if ((rows <= cap) != shared) continue;
      ws.items.push_back(Item{i, begin, rows, batch[i].seq->length + begin, row0});
      add_to_groups(ws.groups, row0, rows, cap);
      row0 += rows;
    }
  }
  return row0;
}

// ---- one layer ----------------------------------------------------------------------------------

// Writes an item's rows of keys and values into its sequence's blocks: the fp32 rows, or in an
// fp8 layer their codes (k_codes / v_codes, laid out as k / v).
void scatter_rows(const Item& item, const PagedSequence& seq, int layer, const float* k,
                  const float* v, const uint8_t* k_codes, const uint8_t* v_codes,
                  KvBlockPool& pool) {
  const int64_t width = pool.row_size();
  const int64_t block_size = pool.block_size();
  const bool fp8 = pool.fp8(layer);
  for (int64_t i = 0; i < item.rows;) {
    const int64_t position = item.first + i;
    const int32_t block = seq.blocks[static_cast<size_t>(position / block_size)];
    const int64_t offset = position % block_size;
    const int64_t run = std::min(item.rows - i, block_size - offset);
    const int64_t first = (item.row0 + i) * width;
    if (fp8) {
      const size_t bytes = static_cast<size_t>(run * width);
      std::memcpy(pool.key_codes(layer, block) + offset * width, k_codes + first, bytes);
      std::memcpy(pool.value_codes(layer, block) + offset * width, v_codes + first, bytes);
    } else {
      const size_t bytes = static_cast<size_t>(run * width) * sizeof(float);
      std::memcpy(pool.keys(layer, block) + offset * width, k + first, bytes);
      std::memcpy(pool.values(layer, block) + offset * width, v + first, bytes);
    }
    i += run;
  }
}

// Attention of every item against its sequence's blocks (this step's rows already written).
void attend(const Model& model, std::span<const BatchEntry> batch, const KvBlockPool& pool,
            int layer, int64_t window, Workspace& ws) {
  const ModelConfig& c = model.config();
  const int64_t q_width = c.num_heads * c.head_dim;
  kernels::AttentionShape base;
  base.heads = static_cast<int>(c.num_heads);
  base.kv_heads = static_cast<int>(c.num_kv_heads);
  base.head_dim = static_cast<int>(c.head_dim);
  base.window = window;
  base.scale = attention_scale(c.head_dim);
  kernels::KvPages layer_pages;
  layer_pages.block_size = pool.block_size();
  if (pool.fp8(layer)) {
    const KvCacheQuantizer& quant = *model.kv_cache_quantizer();
    layer_pages.k_codes = pool.key_codes(layer, 0);
    layer_pages.v_codes = pool.value_codes(layer, 0);
    layer_pages.k_scales = quant.key_scales(layer).data();
    layer_pages.v_scales = quant.value_scales(layer).data();
    layer_pages.scale_count = static_cast<int>(quant.key_scales(layer).size());
    layer_pages.e5m2 = quant.e5m2();
  } else {
    layer_pages.k_blocks = pool.keys(layer, 0);
    layer_pages.v_blocks = pool.values(layer, 0);
  }
  auto run = [&](const Item& item) {
    kernels::AttentionShape shape = base;
    shape.queries = item.rows;
    shape.past = item.first;
    kernels::KvPages pages = layer_pages;
    pages.table = batch[item.entry].seq->blocks.data();
    kernels::attention_paged(ws.q.data() + item.row0 * q_width, pages, shape,
                             ws.context.data() + item.row0 * q_width);
  };
  ws.small_items.clear();
  for (size_t i = 0; i < ws.items.size(); ++i) {
    if (ws.items[i].rows < kSmallAttentionQueries) ws.small_items.push_back(i);
  }
  // Each item's result does not depend on the thread that runs it (the kernel's own parallel
  // regions are inactive in here, and its arithmetic does not depend on the thread count).
  const int64_t small = static_cast<int64_t>(ws.small_items.size());
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 1) if (small > 1)
  for (int64_t s = 0; s < small; ++s) {
    try {
      run(ws.items[ws.small_items[static_cast<size_t>(s)]]);
    } catch (...) {
#pragma omp critical(lowbit_forward_batch_error)
      error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  for (const Item& item : ws.items) {
    if (item.rows >= kSmallAttentionQueries) run(item);
  }
}

// attention_forward (layers/attention.cc) over the stacked rows: x = ws.normed → ws.branch.
void attention_layer(const Model& model, std::span<const BatchEntry> batch, KvBlockPool& pool,
                     int layer, int64_t m, Workspace& ws) {
  const ModelConfig& c = model.config();
  const LayerWeights& lw = model.weights().layers[static_cast<size_t>(layer)];
  const AttentionWeights& w = lw.attention;
  const int heads = static_cast<int>(c.num_heads);
  const int kv_heads = static_cast<int>(c.num_kv_heads);
  const int head_dim = static_cast<int>(c.head_dim);
  const int64_t hidden = c.hidden_size;
  const int64_t q_width = int64_t{heads} * head_dim;
  const int64_t kv_width = int64_t{kv_heads} * head_dim;
  for (const RowGroup& g : ws.groups) {
    const float* x = ws.normed.data() + g.row0 * hidden;
    w.q.apply(x, g.rows, ws.q.data() + g.row0 * q_width);
    w.k.apply(x, g.rows, ws.k.data() + g.row0 * kv_width);
    w.v.apply(x, g.rows, ws.v.data() + g.row0 * kv_width);
  }
  if (!w.q_norm.empty()) {
    const float eps = static_cast<float>(c.rms_norm_eps);
    kernels::rmsnorm(ws.q.data(), w.q_norm.data(), eps, m * heads, head_dim, ws.q.data());
    kernels::rmsnorm(ws.k.data(), w.k_norm.data(), eps, m * kv_heads, head_dim, ws.k.data());
  }
  const int rotary = static_cast<int>(2 * ws.freq[0]->inv_freq.size());
  kernels::rope_apply(ws.q.data(), m, q_width, heads, head_dim, rotary, ws.cos.data(),
                      ws.sin.data());
  kernels::rope_apply(ws.k.data(), m, kv_width, kv_heads, head_dim, rotary, ws.cos.data(),
                      ws.sin.data());
  const KvCacheQuantizer* kv_quant = model.kv_cache_quantizer();
  const bool fp8 = pool.fp8(layer);
  if (fp8) {
    grow(ws.k_codes, m * kv_width);
    grow(ws.v_codes, m * kv_width);
  }
  for (const Item& item : ws.items) {
    float* k_rows = ws.k.data() + item.row0 * kv_width;
    float* v_rows = ws.v.data() + item.row0 * kv_width;
    // What an fp8 cache stores is what attention reads back, this step's rows included.
    if (kv_quant != nullptr) {
      kv_quant->quantize(layer, k_rows, v_rows, item.rows,
                         fp8 ? ws.k_codes.data() + item.row0 * kv_width : nullptr,
                         fp8 ? ws.v_codes.data() + item.row0 * kv_width : nullptr);
    }
    scatter_rows(item, *batch[item.entry].seq, layer, ws.k.data(), ws.v.data(), ws.k_codes.data(),
                 ws.v_codes.data(), pool);
  }
  attend(model, batch, pool, layer, lw.sliding_window, ws);
  for (const RowGroup& g : ws.groups) {
    w.o.apply(ws.context.data() + g.row0 * q_width, g.rows, ws.branch.data() + g.row0 * hidden);
  }
}

// ---- one round ----------------------------------------------------------------------------------

// Runs all layers for the round's items (m rows); leaves the final-normed rows in ws.normed.
void run_round(const Model& model, std::span<const BatchEntry> batch, KvBlockPool& pool, int64_t m,
               Workspace& ws) {
  const ModelConfig& c = model.config();
  const DecoderWeights& w = model.weights();
  const int64_t hidden = c.hidden_size;
  const int64_t half = static_cast<int64_t>(ws.freq[0]->inv_freq.size());
  grow(ws.ids, m);
  grow(ws.x, m * hidden);
  grow(ws.normed, m * hidden);
  grow(ws.branch, m * hidden);
  grow(ws.q, m * c.num_heads * c.head_dim);
  grow(ws.context, m * c.num_heads * c.head_dim);
  grow(ws.k, m * c.num_kv_heads * c.head_dim);
  grow(ws.v, m * c.num_kv_heads * c.head_dim);
  grow(ws.cos, m * half);
  grow(ws.sin, m * half);
  for (const Item& item : ws.items) {
    const int32_t* tokens = batch[item.entry].tokens.data() + item.begin;
    std::copy(tokens, tokens + item.rows, ws.ids.data() + item.row0);
    RotaryEmbedding::cos_sin(*ws.freq[item.entry], item.first, item.rows,
                             ws.cos.data() + item.row0 * half, ws.sin.data() + item.row0 * half);
  }
  kernels::embedding_lookup(w.embed, ws.ids.data(), m, w.embed_scale, ws.x.data());

  const float eps = static_cast<float>(c.rms_norm_eps);
  float* x = ws.x.data();
  float* normed = ws.normed.data();
  float* branch = ws.branch.data();
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& layer = w.layers[l];
    kernels::rmsnorm(x, layer.input_norm.data(), eps, m, hidden, normed);
    attention_layer(model, batch, pool, static_cast<int>(l), m, ws);
    kernels::add_inplace(x, branch, m * hidden);
    kernels::rmsnorm(x, layer.post_attention_norm.data(), eps, m, hidden, normed);
    for (const RowGroup& g : ws.groups) {
      const float* in = normed + g.row0 * hidden;
      float* out = branch + g.row0 * hidden;
      if (layer.is_moe()) {
        moe_forward(layer.moe, c, in, g.rows, ws.moe, out);
      } else {
        mlp_forward(layer.mlp, c.activation, in, g.rows, ws.mlp, out);
      }
    }
    kernels::add_inplace(x, branch, m * hidden);
  }
  kernels::rmsnorm(x, w.final_norm.data(), eps, m, hidden, normed);
}

// The LM head on the round's wanted rows (all rows of all_logits entries, else an entry's last
// row once its last chunk has run), in calls grouped like the layers'. Row sets above `cap` rows
// (an all_logits chunk) run in place; the others are gathered so that they share calls.
void emit_logits(const Model& model, std::span<const BatchEntry> batch, int64_t cap,
                 std::vector<Tensor>& logits, Workspace& ws) {
  const Linear& head = model.weights().lm_head;
  const int64_t hidden = model.config().hidden_size;
  const int64_t vocab = model.config().vocab_size;
  ws.head_rows.clear();
  ws.head_groups.clear();
  int64_t gathered = 0;
  auto want = [&](int64_t src, int64_t rows, float* dst) {
    if (rows > cap) {
      head.apply(ws.normed.data() + src * hidden, rows, dst);
      return;
    }
    ws.head_rows.push_back(HeadRows{src, rows, dst});
    add_to_groups(ws.head_groups, gathered, rows, cap);
    gathered += rows;
  };
  for (const Item& item : ws.items) {
    const BatchEntry& entry = batch[item.entry];
    float* out = logits[item.entry].data_as<float>();
    if (entry.all_logits) {
      want(item.row0, item.rows, out + item.begin * vocab);
    } else if (item.begin + item.rows == static_cast<int64_t>(entry.tokens.size())) {
      want(item.row0 + item.rows - 1, 1, out);
    }
  }
  if (gathered == 0) return;
  grow(ws.head_in, gathered * hidden);
  grow(ws.head_out, gathered * vocab);
  int64_t row = 0;
  for (const HeadRows& h : ws.head_rows) {
    std::copy_n(ws.normed.data() + h.src * hidden, h.rows * hidden,
                ws.head_in.data() + row * hidden);
    row += h.rows;
  }
  for (const RowGroup& g : ws.head_groups) {
    head.apply(ws.head_in.data() + g.row0 * hidden, g.rows, ws.head_out.data() + g.row0 * vocab);
  }
  row = 0;
  for (const HeadRows& h : ws.head_rows) {
    std::copy_n(ws.head_out.data() + row * vocab, h.rows * vocab, h.dst);
    row += h.rows;
  }
}

}  // namespace

std::vector<Tensor> forward_batch(const Model& model, std::span<const BatchEntry> batch,
                                  KvBlockPool& pool, const BatchOptions& options) {
  Workspace& ws = thread_workspace();
  check_batch(model, batch, pool, ws);
  const int64_t cap = options.exact ? exact_group_rows(model) : kUnlimitedRows;
  const int64_t vocab = model.config().vocab_size;
  grow(ws.rope_scratch, static_cast<int64_t>(batch.size()));
  grow(ws.freq, static_cast<int64_t>(batch.size()));
  std::vector<Tensor> logits;
  logits.reserve(batch.size());
  int64_t longest = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t n = static_cast<int64_t>(batch[i].tokens.size());
    // As Model::forward: the frequencies of the call's last position, for all of its chunks.
    ws.freq[i] = &model.rotary().frequencies(batch[i].seq->length + n, ws.rope_scratch[i]);
    logits.push_back(Tensor::zeros(DType::F32, {batch[i].all_logits ? n : 1, vocab}));
    longest = std::max(longest, n);
  }
  for (int64_t begin = 0; begin < longest; begin += kChunkTokens) {
    const int64_t m = plan_round(batch, begin, cap, ws);
    run_round(model, batch, pool, m, ws);
    emit_logits(model, batch, cap, logits, ws);
  }
  for (const BatchEntry& entry : batch)
    entry.seq->length += static_cast<int64_t>(entry.tokens.size());
  return logits;
}

}  // namespace lowbit::models
