// transport_factory.hpp: the table of backends.
#include "transport/transport_factory.hpp"

#include <algorithm>
#include <functional>
#include <stdexcept>

#include "transport/local/local_transport.hpp"
#include "transport/ucx/ucx_transport.hpp"

namespace actorpipe::transport {
namespace {

std::shared_ptr<tensor_transport> make_local(const transport_options& o) {
  if (o.processes != 1)
    throw std::invalid_argument("transport kind 'local' serves one process: got processes=" + std::to_string(o.processes));
  return make_local_transport();
}

std::shared_ptr<tensor_transport> make_ucx(const transport_options& o) {
  // Received tensors come from a pool of buffers (fresh memory is several times slower to
  // receive into): keep at least what may be in flight idle for reuse.
  ucx_receive_pool_options pool;
  pool.max_idle_bytes = std::max(pool.max_idle_bytes, o.in_flight_bytes);
  return std::make_shared<ucx_transport>(o.process, o.processes, o.limits, pool);
}

struct backend {
  const char* kind;
  std::function<std::shared_ptr<tensor_transport>(const transport_options&)> make;
};

// One line per backend.
const std::vector<backend>& backends() {
  static const std::vector<backend> all = {
      {"local", make_local},
      {"ucx", make_ucx},
  };
  return all;
}

}  // namespace

std::string default_transport_kind(int processes) { return processes > 1 ? "ucx" : "local"; }

std::vector<std::string> tensor_transport_kinds() {
  std::vector<std::string> out;
  for (const backend& b : backends()) out.push_back(b.kind);
  return out;
}

std::shared_ptr<tensor_transport> make_tensor_transport(const transport_options& options) {
  for (const backend& b : backends())
    if (options.kind == b.kind) return b.make(options);
  std::string known;
  for (const backend& b : backends()) known += (known.empty() ? "" : ", ") + std::string(b.kind);
  throw std::invalid_argument("transport kind '" + options.kind + "' is unknown (known: " + known + ")");
}

}  // namespace actorpipe::transport
