// Embedding routes: POST /v1/embeddings (OpenAI's shape) and llama-server's
// POST /embedding and /embeddings (its native shape), from the same model and
// server that answer chat (docs/embeddings.md).
//
// Inputs: a string, an array of strings, an array of token ids (one input),
// or an array of such arrays/strings; each input is tokenized as llama-server
// does (special tokens added and parsed) and embedded as its own sequence in a
// context kept for embeddings (made on the first request, sized like a slot),
// on the engine thread between two generation steps, many inputs per decode
// (runtime/embedding.h). Pooling: --pooling, else the GGUF's
// <arch>.pooling_type (absent: none, as llama.cpp). OpenAI's endpoint needs a
// pooled vector, so pooling none is a 400 there (as llama-server); the native
// one then returns every token's vector, unnormalised (as llama-server).
#include <fmt/format.h>

#include <cstring>

#include "core/error.h"
#include "runtime/embedding.h"
#include "server/state.h"

namespace opal::server {
namespace {

constexpr size_t kMaxInputs = 2048;  // OpenAI's limit per request

std::string base64(const std::vector<float>& v) {
  static const char* const kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());  // little-endian float32, as OpenAI's
  std::string out;
  out.reserve((b.size() + 2) / 3 * 4);
  for (size_t i = 0; i < b.size(); i += 3) {
    const uint32_t n = uint32_t(b[i]) << 16 | (i + 1 < b.size() ? uint32_t(b[i + 1]) << 8 : 0) |
                       (i + 2 < b.size() ? uint32_t(b[i + 2]) : 0);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < b.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < b.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

// The inputs of `value` (the body's `param`), tokenized; 400 naming the input for bad ones.
std::vector<std::vector<int32_t>> read_inputs(Server::State& st, const json& value, const char* param) {
  std::vector<std::vector<int32_t>> inputs;
  const size_t max_bytes = st.engine->max_prompt_bytes();
  if (value.is_array() && value.empty()) bad_request(fmt::format("'{}' is an empty array", param), param);
  bool one = !value.is_array();
  if (value.is_array())
    for (const json& e : value) one = one || e.is_number();  // token ids (and text beside them): one input
  if (one) {
    inputs.push_back(read_prompt(value, *st.vocab, param, max_bytes));
  } else {
    if (value.size() > kMaxInputs)
      bad_request(fmt::format("'{}' has {} inputs; at most {} per request", param, value.size(), kMaxInputs), param);
    for (size_t i = 0; i < value.size(); ++i) {
      const std::string where = fmt::format("{}[{}]", param, i);
      const json& e = value[i];
      if (!e.is_string() && !e.is_array())
        bad_request(fmt::format("'{}' must be a string or an array of token ids, got {}", where, e.type_name()), param);
      if (e.is_array() && e.empty()) bad_request(fmt::format("'{}' is empty", where), param);
      inputs.push_back(read_prompt(e, *st.vocab, where.c_str(), max_bytes));
    }
  }
  const int64_t n_ctx = st.engine->n_ctx_slot();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string where = one ? std::string(param) : fmt::format("{}[{}]", param, i);
    if (inputs[i].empty()) bad_request(fmt::format("'{}' is empty (no tokens to embed)", where), param);
    if (int64_t(inputs[i].size()) > n_ctx)
      bad_request(fmt::format("'{}' has {} tokens, more than the context holds ({} tokens per slot: raise -c or "
                              "lower -np)",
                              where, inputs[i].size(), n_ctx),
                  param);
  }
  return inputs;
}

std::vector<EmbeddingVectors> run_embed(Server::State& st, const std::vector<std::vector<int32_t>>& inputs,
                                        Pooling pooling, int normalize) {
  if (!st.ready || st.stopping)
    throw HttpError(503, "unavailable_error", st.stopping ? "the server is shutting down" : "Loading model");
  if (st.draining)
    throw HttpError(503, "unavailable_error", "the server is draining (stopping after its requests in flight)");
  std::vector<EmbeddingVectors> out;
  try {
    st.engine->run_on_engine([&] {
      if (!st.embd_ctx) {
        ContextParams cp = st.ctx->params();
        cp.n_ctx = st.engine->n_ctx_slot();
        cp.n_batch = cp.n_ctx;
        cp.n_ubatch = std::min(cp.n_ubatch, cp.n_ctx);
        cp.n_seq_max = st.model->hparams().recurrent ? 4 : 64;
        st.embd_ctx = std::make_unique<Context>(*st.model, cp);
        st.embd_ctx->set_hooks(st.opts.hooks);
      }
      out = embed(*st.embd_ctx, inputs, {.pooling = pooling, .normalize = normalize});
    });
  } catch (const HttpError&) {
    throw;
  } catch (const std::exception& e) {
    if (st.stopping) throw HttpError(503, "unavailable_error", e.what());
    throw HttpError(500, "server_error", fmt::format("embedding failed: {}", e.what()));
  }
  return out;
}

Pooling server_pooling(const Server::State& st) { return Pooling(st.pooling); }

void handle_openai(Server::State& st, const HttpRequest& req, HttpResponse& res) {
  const json body = parse_body(req.body);
  if (!st.ready) throw HttpError(503, "unavailable_error", "Loading model");
  auto in = body.find("input");
  if (in == body.end() || in->is_null()) bad_request("'input' is required", "input");
  const std::string format = get_string(body, "encoding_format").value_or("float");
  if (format != "float" && format != "base64")
    bad_request(fmt::format("'encoding_format' must be 'float' or 'base64', got '{}'", format), "encoding_format");
  const int64_t n_embd = st.model->hparams().n_embd;
  if (auto d = get_int(body, "dimensions", 1, INT32_MAX); d && *d != n_embd)
    bad_request(fmt::format("'dimensions' {} is not supported: this model's embeddings have {}", *d, n_embd),
                "dimensions");
  const Pooling pooling = server_pooling(st);
  if (pooling == Pooling::None)
    bad_request(fmt::format("pooling 'none' gives one vector per token, which the OpenAI API has no shape for: "
                            "the model's GGUF {} (llama.cpp then uses none); start the server with "
                            "--pooling mean, cls or last, or use /embedding",
                            st.opts.pooling.empty() ? "has no " + st.model->hparams().arch + ".pooling_type"
                                                    : std::string("was given --pooling none")),
                "input");
  const auto inputs = read_inputs(st, *in, "input");
  const auto vectors = run_embed(st, inputs, pooling, 2);
  json data = json::array();
  int64_t n_tokens = 0;
  for (size_t i = 0; i < vectors.size(); ++i) {
    json e;
    e["object"] = "embedding";
    e["index"] = i;
    if (format == "base64") e["embedding"] = base64(vectors[i][0]);
    else e["embedding"] = vectors[i][0];
    data.push_back(std::move(e));
    n_tokens += int64_t(inputs[i].size());
  }
  json out;
  out["object"] = "list";
  out["data"] = std::move(data);
  out["model"] = st.model_id;
  out["usage"] = {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}};
  res.set_content(dump(out), "application/json");
}

// llama-server's /embedding: [{"index": i, "embedding": [[...], ...]}], one vector per input when pooled
// (normalised by embd_normalize, default 2), every token's raw vector with pooling none.
void handle_native(Server::State& st, const HttpRequest& req, HttpResponse& res) {
  const json body = parse_body(req.body);
  if (!st.ready) throw HttpError(503, "unavailable_error", "Loading model");
  const char* param = "content";
  auto in = body.find("content");
  if (in == body.end() || in->is_null()) {
    param = "input";
    in = body.find("input");
  }
  if (in == body.end() || in->is_null()) bad_request("'content' (or 'input') is required", "content");
  const int normalize = int(get_int(body, "embd_normalize", -1, 1000).value_or(2));
  const Pooling pooling = server_pooling(st);
  const auto inputs = read_inputs(st, *in, param);
  const auto vectors = run_embed(st, inputs, pooling, pooling == Pooling::None ? -1 : normalize);
  json out = json::array();
  for (size_t i = 0; i < vectors.size(); ++i) out.push_back({{"index", i}, {"embedding", vectors[i]}});
  res.set_content(dump(out), "application/json");
}

}  // namespace

void register_embedding_routes(Server::State& st) {
  auto openai = [&st](const HttpRequest& req, HttpResponse& res) { handle_openai(st, req, res); };
  auto native = [&st](const HttpRequest& req, HttpResponse& res) { handle_native(st, req, res); };
  st.http.Post("/v1/embeddings", openai);
  st.http.Post("/embedding", native);
  st.http.Post("/embeddings", native);
}

}  // namespace opal::server
