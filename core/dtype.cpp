#include "core/dtype.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "core/error.h"

namespace opal {
namespace {

constexpr std::array kTraits = {
    DTypeTraits{DType::F32, "f32", 1, 4, false, true},
    DTypeTraits{DType::F16, "f16", 1, 2, false, true},
    DTypeTraits{DType::Q4_0, "q4_0", 32, 18, true, true},
    DTypeTraits{DType::Q4_1, "q4_1", 32, 20, true, true},
    DTypeTraits{DType::Q5_0, "q5_0", 32, 22, true, true},
    DTypeTraits{DType::Q5_1, "q5_1", 32, 24, true, true},
    DTypeTraits{DType::Q8_0, "q8_0", 32, 34, true, true},
    DTypeTraits{DType::Q8_1, "q8_1", 32, 36, true, false},
    DTypeTraits{DType::Q2_K, "q2_K", 256, 84, true, true},
    DTypeTraits{DType::Q3_K, "q3_K", 256, 110, true, true},
    DTypeTraits{DType::Q4_K, "q4_K", 256, 144, true, true},
    DTypeTraits{DType::Q5_K, "q5_K", 256, 176, true, true},
    DTypeTraits{DType::Q6_K, "q6_K", 256, 210, true, true},
    DTypeTraits{DType::Q8_K, "q8_K", 256, 292, true, true},
    DTypeTraits{DType::IQ2_XXS, "iq2_xxs", 256, 66, true, false},
    DTypeTraits{DType::IQ2_XS, "iq2_xs", 256, 74, true, false},
    DTypeTraits{DType::IQ3_XXS, "iq3_xxs", 256, 98, true, false},
    DTypeTraits{DType::IQ1_S, "iq1_s", 256, 50, true, false},
    DTypeTraits{DType::IQ4_NL, "iq4_nl", 32, 18, true, true},
    DTypeTraits{DType::IQ3_S, "iq3_s", 256, 110, true, false},
    DTypeTraits{DType::IQ2_S, "iq2_s", 256, 82, true, false},
    DTypeTraits{DType::IQ4_XS, "iq4_xs", 256, 136, true, true},
    DTypeTraits{DType::I8, "i8", 1, 1, false, false},
    DTypeTraits{DType::I16, "i16", 1, 2, false, false},
    DTypeTraits{DType::I32, "i32", 1, 4, false, false},
    DTypeTraits{DType::I64, "i64", 1, 8, false, false},
    DTypeTraits{DType::F64, "f64", 1, 8, false, false},
    DTypeTraits{DType::IQ1_M, "iq1_m", 256, 56, true, false},
    DTypeTraits{DType::BF16, "bf16", 1, 2, false, true},
    DTypeTraits{DType::TQ1_0, "tq1_0", 256, 54, true, false},
    DTypeTraits{DType::TQ2_0, "tq2_0", 256, 66, true, false},
    DTypeTraits{DType::MXFP4, "mxfp4", 32, 17, true, false},
};

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower((unsigned char)x) == std::tolower((unsigned char)y);
         });
}

}  // namespace

const DTypeTraits* dtype_traits_or_null(uint32_t raw) {
  for (const auto& t : kTraits)
    if (uint32_t(t.type) == raw) return &t;
  return nullptr;
}

const DTypeTraits& dtype_traits(DType t) {
  const DTypeTraits* p = dtype_traits_or_null(uint32_t(t));
  if (!p) fail("unknown tensor type {}", uint32_t(t));
  return *p;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& t : kTraits)
    if (iequal(t.name, name)) return t.type;
  return std::nullopt;
}

}  // namespace opal
