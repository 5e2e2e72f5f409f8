// Sampler parameters: llama.cpp's sampler names (canonical, alternative and
// one-letter forms of --samplers / --sampling-seq) and range checks that turn a
// bad value into an opal::Error naming the field.
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "sampling/sampler.h"
#include "sampling/sampler_steps.h"

namespace opal {
namespace {

struct NameEntry {
  std::string_view name;
  std::string_view canonical;
};

// llama.cpp's canonical names map to themselves; the rest are the alternative
// spellings its --samplers accepts.
constexpr NameEntry kNames[] = {
    {"penalties", "penalties"},
    {"dry", "dry"},
    {"top_n_sigma", "top_n_sigma"},
    {"top_k", "top_k"},
    {"typ_p", "typ_p"},
    {"top_p", "top_p"},
    {"min_p", "min_p"},
    {"xtc", "xtc"},
    {"temperature", "temperature"},
    {"infill", "infill"},
    {"adaptive_p", "adaptive_p"},
    {"top-k", "top_k"},
    {"top-p", "top_p"},
    {"top-n-sigma", "top_n_sigma"},
    {"nucleus", "top_p"},
    {"typical-p", "typ_p"},
    {"typical", "typ_p"},
    {"typ-p", "typ_p"},
    {"typ", "typ_p"},
    {"min-p", "min_p"},
    {"temp", "temperature"},
    {"adaptive-p", "adaptive_p"},
};

struct LetterEntry {
  char letter;
  std::string_view canonical;
};
constexpr LetterEntry kLetters[] = {
    {'d', "dry"},         {'k', "top_k"}, {'y', "typ_p"},  {'p', "top_p"},     {'s', "top_n_sigma"}, {'m', "min_p"},
    {'t', "temperature"}, {'x', "xtc"},   {'i', "infill"}, {'e', "penalties"}, {'a', "adaptive_p"},
};

const std::string_view kKnownList = "penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature";

// Canonical name of a supported sampler, or an opal::Error.
std::string canonical_name(std::string_view name) {
  for (const auto& e : kNames) {
    if (e.name == name) {
      if (e.canonical == "infill" || e.canonical == "adaptive_p") {
        fail(
            "sampling: sampler '{}' is a llama.cpp sampler that opal does not implement "
            "(supported: {})",
            name, kKnownList);
      }
      return std::string(e.canonical);
    }
  }
  fail("sampling: unknown sampler name '{}' (supported: {})", name, kKnownList);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

void check_unit(const char* field, float v) {
  if (!(v >= 0.0f && v <= 1.0f)) fail("sampling: {} must be in [0, 1], got {}", field, v);
}

void check_finite(const char* field, float v) {
  if (!std::isfinite(v)) fail("sampling: {} must be a finite number, got {}", field, v);
}

}  // namespace

std::vector<std::string> default_sampler_order() {
  return {"penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"};
}

std::vector<std::string> parse_sampler_names(std::string_view list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(';', start);
    if (end == std::string_view::npos) end = list.size();
    std::string_view name = trim(list.substr(start, end - start));
    if (!name.empty()) out.push_back(canonical_name(name));  // "a;;b" and "a;" are lenient
    start = end + 1;
  }
  return out;
}

std::vector<std::string> parse_sampler_letters(std::string_view letters) {
  std::vector<std::string> out;
  for (char c : letters) {
    bool found = false;
    for (const auto& e : kLetters) {
      if (e.letter == c) {
        out.push_back(canonical_name(e.canonical));
        found = true;
        break;
      }
    }
    if (!found) {
      fail(
          "sampling: unknown sampler letter '{}' in '{}' (letters: e=penalties d=dry "
          "s=top_n_sigma k=top_k y=typ_p p=top_p m=min_p x=xtc t=temperature)",
          c, letters);
    }
  }
  return out;
}

std::vector<SamplerStep> steps_from_names(const std::vector<std::string>& order) {
  std::vector<SamplerStep> steps;
  steps.reserve(order.size());
  for (const auto& raw_name : order) {
    std::string name = canonical_name(trim(raw_name));
    if (name == "penalties") steps.push_back(SamplerStep::penalties);
    else if (name == "dry") steps.push_back(SamplerStep::dry);
    else if (name == "top_n_sigma") steps.push_back(SamplerStep::top_n_sigma);
    else if (name == "top_k") steps.push_back(SamplerStep::top_k);
    else if (name == "typ_p") steps.push_back(SamplerStep::typical_p);
    else if (name == "top_p") steps.push_back(SamplerStep::top_p);
    else if (name == "min_p") steps.push_back(SamplerStep::min_p);
    else if (name == "xtc") steps.push_back(SamplerStep::xtc);
    else if (name == "temperature") steps.push_back(SamplerStep::temperature);
    else fail("sampling: internal: sampler '{}' has no step", name);
  }
  return steps;
}

const char* step_name(SamplerStep step) {
  switch (step) {
    case SamplerStep::penalties: return "penalties";
    case SamplerStep::dry: return "dry";
    case SamplerStep::top_n_sigma: return "top_n_sigma";
    case SamplerStep::top_k: return "top_k";
    case SamplerStep::typical_p: return "typ_p";
    case SamplerStep::top_p: return "top_p";
    case SamplerStep::min_p: return "min_p";
    case SamplerStep::xtc: return "xtc";
    case SamplerStep::temperature: return "temperature";
  }
  return "?";
}

void validate(const SamplerParams& p, int32_t n_vocab) {
  if (n_vocab <= 0) fail("sampling: the vocabulary size must be positive, got {}", n_vocab);
  check_finite("temperature", p.temp);
  check_unit("top_p", p.top_p);
  check_unit("min_p", p.min_p);
  check_unit("typical_p", p.typical_p);
  check_finite("top_n_sigma", p.top_n_sigma);
  check_unit("xtc_probability", p.xtc_probability);
  check_unit("xtc_threshold", p.xtc_threshold);
  if (p.min_keep < 0) fail("sampling: min_keep must be >= 0, got {}", p.min_keep);
  check_finite("repeat_penalty", p.repeat_penalty);
  if (p.repeat_penalty <= 0.0f) {
    fail("sampling: repeat_penalty must be > 0 (1 = off), got {}", p.repeat_penalty);
  }
  if (p.repeat_last_n < -1) {
    fail("sampling: repeat_last_n must be >= -1 (0 = off, -1 = whole sequence), got {}", p.repeat_last_n);
  }
  check_finite("presence_penalty", p.presence_penalty);
  check_finite("frequency_penalty", p.frequency_penalty);
  if (p.n_probs < 0) fail("sampling: n_probs must be >= 0, got {}", p.n_probs);
  for (const auto& [token, bias] : p.logit_bias) {
    if (token < 0 || token >= n_vocab) {
      fail("sampling: logit_bias token {} is outside the vocabulary [0, {})", token, n_vocab);
    }
    if (std::isnan(bias) || bias == INFINITY) {
      fail("sampling: logit_bias for token {} must be finite or -inf (ban), got {}", token, bias);
    }
  }
  steps_from_names(p.order);  // throws on an unknown or unsupported name
}

}  // namespace opal
