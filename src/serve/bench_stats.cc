#include "serve/bench_stats.h"

#include <algorithm>
#include <cmath>

#include "lowbit/error.h"

namespace lowbit::serve {
namespace {

// numpy's pairwise summation (what numpy.sum does on a contiguous float64 array): 8 running sums in
// blocks of up to 128 values, halves above that. Summing in the same order gives bit-identical
// means and standard deviations, so the golden test can compare exactly.
double pairwise_sum(const double* a, size_t n) {
  if (n < 8) {
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += a[i];
    return sum;
  }
  if (n <= 128) {
    double r[8];
    for (size_t k = 0; k < 8; ++k) r[k] = a[k];
    size_t i = 8;
    for (; i < n - n % 8; i += 8) {
      for (size_t k = 0; k < 8; ++k) r[k] += a[i + k];
    }
    double sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) sum += a[i];
    return sum;
  }
  size_t half = n / 2;
  half -= half % 8;
  return pairwise_sum(a, half) + pairwise_sum(a + half, n - half);
}

double mean_of(const std::vector<double>& values) {
  return pairwise_sum(values.data(), values.size()) / static_cast<double>(values.size());
}

// Linear interpolation between sorted neighbours, in numpy's two-sided form (from the lower value
// below the midpoint, from the upper one above it), which keeps results monotonic in q.
double lerp_sorted(const std::vector<double>& sorted, double q) {
  const double index = static_cast<double>(sorted.size() - 1) * (q / 100.0);
  const double lower_index = std::floor(index);
  const double gamma = index - lower_index;
  const size_t lo = static_cast<size_t>(lower_index);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double a = sorted[lo], b = sorted[hi];
  const double diff = b - a;
  return gamma >= 0.5 ? b - diff * (1 - gamma) : a + diff * gamma;
}

// One-second buckets from the earliest successful start, as vLLM's calculate_metrics builds them:
// the peak number of output tokens whose chunk arrived in one second, and the peak number of
// requests active during one second.
void peak_rates(const std::vector<RequestResult>& results, BenchMetrics& m) {
  double first_start = INFINITY, last_end = -INFINITY;
  for (const auto& r : results) {
    if (!r.success) continue;
    first_start = std::min(first_start, r.start_time);
    last_end = std::max(last_end, r.start_time + r.latency);
  }
  if (!std::isfinite(first_start)) return;
  const size_t seconds = static_cast<size_t>(std::ceil(last_end - first_start)) + 1;
  std::vector<double> tokens(seconds, 0), active(seconds, 0);
  for (const auto& r : results) {
    if (!r.success) continue;
    double t = r.start_time + r.ttft;
    auto count_token = [&](double when) {
      const double offset = when - first_start;
      if (offset >= 0 && offset < static_cast<double>(seconds))
        tokens[static_cast<size_t>(offset)] += 1;
    };
    count_token(t);
    for (double gap : r.itl) {
      t += gap;
      count_token(t);
    }
    const size_t from = static_cast<size_t>(r.start_time - first_start);
    const size_t to = static_cast<size_t>(r.start_time + r.latency - first_start);
    for (size_t s = from; s <= to && s < seconds; ++s) active[s] += 1;
  }
  m.max_output_tokens_per_s = *std::max_element(tokens.begin(), tokens.end());
  m.max_concurrent_requests = static_cast<int64_t>(*std::max_element(active.begin(), active.end()));
}

}  // namespace

double percentile(std::vector<double> values, double q) {
  LOWBIT_CHECK(!values.empty(), "percentile: no values");
  LOWBIT_CHECK(q >= 0 && q <= 100, "percentile: q must be in [0, 100], got " + std::to_string(q));
  std::sort(values.begin(), values.end());
  return lerp_sorted(values, q);
}

Distribution summarize(const std::vector<double>& input, const std::vector<double>& percentiles) {
  const std::vector<double> values = input.empty() ? std::vector<double>{0.0} : input;
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  Distribution d;
  d.mean = mean_of(values);
  const size_t n = sorted.size();
  // numpy.median averages the two middle values of an even-sized list.
  d.median = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  std::vector<double> squares(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const double diff = values[i] - d.mean;
    squares[i] = diff * diff;
  }
  d.std = std::sqrt(mean_of(squares));
  for (double q : percentiles) {
    LOWBIT_CHECK(q >= 0 && q <= 100, "percentile: q must be in [0, 100], got " + std::to_string(q));
    d.percentiles.emplace_back(q, lerp_sorted(sorted, q));
  }
  return d;
}

BenchMetrics compute_metrics(const std::vector<RequestResult>& results, double duration_s,
                             const std::vector<double>& percentiles) {
  LOWBIT_CHECK(duration_s > 0, "compute_metrics: the duration must be positive");
  BenchMetrics m;
  m.duration = duration_s;
  std::vector<double> ttfts, tpots, itls, e2els;
  for (const auto& r : results) {
    if (!r.success) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.total_input += r.prompt_tokens;
    m.total_output += r.output_tokens;
    if (r.output_tokens > 1)
      tpots.push_back((r.latency - r.ttft) / static_cast<double>(r.output_tokens - 1));
    itls.insert(itls.end(), r.itl.begin(), r.itl.end());
    ttfts.push_back(r.ttft);
    e2els.push_back(r.latency);
  }
  m.request_throughput = static_cast<double>(m.completed) / duration_s;
  m.output_throughput = static_cast<double>(m.total_output) / duration_s;
  m.total_token_throughput = static_cast<double>(m.total_input + m.total_output) / duration_s;
  // Summarized in seconds and scaled afterwards, as vLLM does (np.mean(ttfts) * 1000).
  auto in_ms = [&](const std::vector<double>& seconds) {
    Distribution d = summarize(seconds, percentiles);
    d.mean *= 1000;
    d.median *= 1000;
    d.std *= 1000;
    for (auto& p : d.percentiles) p.second *= 1000;
    return d;
  };
  m.ttft_ms = in_ms(ttfts);
  m.tpot_ms = in_ms(tpots);
  m.itl_ms = in_ms(itls);
  m.e2el_ms = in_ms(e2els);
  peak_rates(results, m);
  return m;
}

}  // namespace lowbit::serve
