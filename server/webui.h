// The chat page served by `opal serve` at `/` (files in server/webui/, docs/server.md
// "Chat page"). The build bundles the files into the binary (cmake/embed_webui.cmake
// generates bundled_webui()); `--path DIR` serves them from a directory instead,
// `--no-webui` not at all. The helpers below are the HTTP rules the routes use.
#pragma once
#include <span>
#include <string_view>

namespace opal::server {

// One bundled file: its URL path ("/app.js"), Content-Type, strong ETag (quoted),
// its bytes, and a gzip copy (empty when gzip did not make it smaller).
struct WebAsset {
  std::string_view path;
  std::string_view content_type;
  std::string_view etag;
  std::string_view data;
  std::string_view gzip;
};

// Every bundled file (generated at build time).
std::span<const WebAsset> bundled_webui();
// The bundled file for a URL path ("/" is /index.html), or null.
const WebAsset* find_bundled(std::string_view path);

// Content-Type for a file name from its extension ("" when unknown).
std::string_view content_type_for(std::string_view name);
// Whether an Accept-Encoding header allows gzip (a "gzip" coding, or "*", without q=0).
bool accepts_gzip(std::string_view accept_encoding);
// Whether an If-None-Match header names `etag` (or is "*"); weak tags compare equal to strong ones.
bool etag_matches(std::string_view if_none_match, std::string_view etag);
// Whether an Accept header asks for JSON rather than a page (application/json, and no text/html).
bool prefers_json(std::string_view accept);

}  // namespace opal::server
