#pragma once
// The playground's files (web/), embedded in the binary at build time by
// cmake/embed_assets.cmake: served at /playground/<name>, index.html also at /.

#include <span>
#include <string_view>

namespace tf {

struct WebAsset {
  std::string_view path;          // "/playground/app.js"
  std::string_view content_type;  // "text/javascript; charset=utf-8"
  std::string_view body;
};

std::span<const WebAsset> web_assets();

// The asset a GET path names ("/" is the page), or nullptr.
inline const WebAsset* find_web_asset(std::string_view path) {
  if (path == "/" || path == "/playground" || path == "/playground/")
    path = "/playground/index.html";
  for (const WebAsset& a : web_assets())
    if (a.path == path) return &a;
  return nullptr;
}

}  // namespace tf
