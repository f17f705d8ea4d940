// The dashboard's files (server/http/dashboard/: the page, its script and style; Dygraphs from
// Debian's libjs-dygraphs), embedded into mpsd at build time by
// server/http/dashboard/embed_assets.cmake, so that one binary serves the whole page.
#ifndef MPSD_SERVER_HTTP_DASHBOARD_ASSETS_H_
#define MPSD_SERVER_HTTP_DASHBOARD_ASSETS_H_

#include <string_view>

namespace mpsd::server {

// One embedded file. Static storage: the views stay valid for the life of the process.
struct DashboardAsset {
  // As served, e.g. "/" or "/assets/app.js".
  std::string_view path;
  // e.g. "text/javascript; charset=utf-8".
  std::string_view content_type;
  std::string_view body;
  // A strong HTTP entity tag (quoted): the first 16 hex digits of the file's SHA-256.
  std::string_view etag;
};

// The asset served at `path`, or nullptr. Thread-safe (constant data).
const DashboardAsset* FindDashboardAsset(std::string_view path);

}  // namespace mpsd::server

#endif  // MPSD_SERVER_HTTP_DASHBOARD_ASSETS_H_
