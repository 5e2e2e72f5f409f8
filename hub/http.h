// The hub folder's HTTP requests (libcurl), shared by download.cpp and hf.cpp.
#pragma once
#include <string>

#include "hub/hub.h"

namespace opal::hub {

// HEAD, following redirects: the status and what the server announced.
// Throws opal::Error when the server cannot be reached.
RemoteFile head(const HubOptions& o, const std::string& url);
// GET of a small text body (a file list); throws opal::Error naming the URL
// and the HTTP status on failure.
std::string get_text(const HubOptions& o, const std::string& url);

}  // namespace opal::hub
