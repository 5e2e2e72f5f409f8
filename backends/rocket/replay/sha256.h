// SHA-256 (FIPS 180-4), used to check regenerated golden host data and packed
// buffers against the digests recorded in the golden cases.
#pragma once
#include <cstdint>
#include <span>
#include <string>

namespace opal::rocket {

std::string sha256_hex(std::span<const uint8_t> data);

}  // namespace opal::rocket
