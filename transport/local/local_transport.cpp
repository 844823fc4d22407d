// local/: see local_transport.hpp.
#include "transport/local/local_transport.hpp"

#include <stdexcept>
#include <string>

namespace actorpipe::transport {
namespace {

class local_transport final : public tensor_transport {
 public:
  std::string name() const override { return "local"; }
  // One process: no peers to reach, nothing to hand out.
  std::vector<std::uint8_t> address() const override { return {}; }
  void connect(const std::vector<std::vector<std::uint8_t>>& addresses) override {
    if (addresses.size() > 1)
      throw std::invalid_argument("local transport: connect to " + std::to_string(addresses.size()) +
                                  " processes, but it serves one process only");
  }
  void set_handlers(receive_handler on_receive, failure_handler on_failure) override {
    on_receive_ = std::move(on_receive);
    on_failure_ = std::move(on_failure);
  }
  void send(int dest, tensor_meta meta, tensor_box tensor) override {
    if (dest != 0) throw std::invalid_argument("local transport: dest=" + std::to_string(dest) + " but there is only process 0");
    if (!on_receive_) throw std::logic_error("local transport: send before set_handlers");
    if (tensor.defined()) {
      meta.shape = tensor.shape();
      meta.nbytes = tensor.nbytes();
    }
    on_receive_(meta, std::move(tensor));
  }

 private:
  receive_handler on_receive_;
  failure_handler on_failure_;
};

}  // namespace

std::shared_ptr<tensor_transport> make_local_transport() { return std::make_shared<local_transport>(); }

}  // namespace actorpipe::transport
