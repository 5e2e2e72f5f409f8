// Quantization recipes: llama.cpp's file types (LLAMA_FTYPE_* numbers and
// llama-quantize's names) and the rule that picks each tensor's type in a mixed
// recipe (llama.cpp's llama_tensor_get_type, without importance matrix). The
// resulting table is documented in docs/quantize.md.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/gguf.h"

namespace opal::quant {

// general.file_type values (llama.cpp's enum llama_ftype).
enum class FileType : int {
  ALL_F32 = 0,
  MOSTLY_F16 = 1,
  MOSTLY_Q4_0 = 2,
  MOSTLY_Q4_1 = 3,
  MOSTLY_Q8_0 = 7,
  MOSTLY_Q5_0 = 8,
  MOSTLY_Q5_1 = 9,
  MOSTLY_Q2_K = 10,
  MOSTLY_Q3_K_S = 11,
  MOSTLY_Q3_K_M = 12,
  MOSTLY_Q3_K_L = 13,
  MOSTLY_Q4_K_S = 14,
  MOSTLY_Q4_K_M = 15,
  MOSTLY_Q5_K_S = 16,
  MOSTLY_Q5_K_M = 17,
  MOSTLY_Q6_K = 18,
  MOSTLY_IQ4_NL = 25,
  MOSTLY_BF16 = 32,
};

struct FileTypeInfo {
  FileType ftype;
  const char* name;     // llama-quantize's name, e.g. "Q4_K_M"
  DType default_type;   // type of most weights
  const char* summary;  // one line for --help
};

// llama.cpp's display name of a general.file_type value (llama_model_ftype_name:
// "Q4_K - Medium", "IQ4_NL - 4.5 bpw", ...), or null for a value it does not name.
const char* file_type_display_name(int64_t ft);

// The file types `opal quantize` can produce.
std::span<const FileTypeInfo> file_types();
const FileTypeInfo& file_type_info(FileType t);
// A name (case-insensitive, also the aliases Q3_K, Q4_K, Q5_K for the _M variants)
// or a decimal LLAMA_FTYPE number; nullopt if neither.
std::optional<FileType> parse_file_type(std::string_view s);

// What the type rules need to know about the model (from its metadata).
struct ModelShape {
  std::string arch;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int n_expert = 0;
  int n_gqa() const { return n_head_kv > 0 ? n_head / n_head_kv : 0; }
  static ModelShape from_gguf(const gguf::File& f);
};

struct RecipeOptions {
  FileType ftype = FileType::MOSTLY_Q8_0;
  bool pure = false;                     // every quantizable tensor gets the default type
  std::optional<DType> output_type;      // --output-tensor-type
  std::optional<DType> token_embd_type;  // --token-embedding-type
};

struct TensorDesc {
  std::string name;
  std::vector<int64_t> ne;
  DType type;  // current type
};

// llama.cpp's order of tensors in a quantized file: tensors outside blocks first,
// then by block number; by name within each group.
bool tensor_order_less(const std::string& a, const std::string& b);

// The type of each tensor (same order as `tensors`, which must already be in
// tensor_order_less order: the layer counters of the rules depend on it).
// Tensors that are not quantized keep their type. Shape fallbacks (ne0 not a
// multiple of the block size) are appended to *notes when notes is non-null.
// Throws opal::Error when no compatible type exists.
std::vector<DType> choose_tensor_types(const ModelShape& model, const std::vector<TensorDesc>& tensors,
                                       const RecipeOptions& opt, std::vector<std::string>* notes = nullptr);

}  // namespace opal::quant
