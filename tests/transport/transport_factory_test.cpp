// Tests for transport/transport_factory: the kinds it knows, a clear error for one it does not,
// and a "local" transport that hands a tensor over in one process.
#include "core/model/tensor_box_torch.hpp"

#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "transport/transport_factory.hpp"

using namespace actorpipe;
using namespace actorpipe::transport;

CATCH_TEST_CASE("transport factory: the default kind is local for one process, ucx for several") {
  CATCH_CHECK(default_transport_kind(1) == "local");
  CATCH_CHECK(default_transport_kind(2) == "ucx");
  CATCH_CHECK(tensor_transport_kinds() == std::vector<std::string>{"local", "ucx"});
}

CATCH_TEST_CASE("transport factory: an unknown kind is refused, naming the value and the known kinds") {
  transport_options o;
  o.kind = "carrier-pigeon";
  try {
    make_tensor_transport(o);
    CATCH_FAIL("no error for kind 'carrier-pigeon'");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    CATCH_CHECK(what.find("'carrier-pigeon'") != std::string::npos);
    CATCH_CHECK(what.find("local, ucx") != std::string::npos);
  }
}

CATCH_TEST_CASE("transport factory: local serves one process only") {
  transport_options o;
  o.kind = "local";
  o.processes = 2;
  CATCH_REQUIRE_THROWS_WITH(make_tensor_transport(o), Catch::Contains("processes=2"));
}

CATCH_TEST_CASE("transport factory: a local transport hands a tensor to this process") {
  transport_options o;  // kind "local", one process
  auto t = make_tensor_transport(o);
  CATCH_REQUIRE(t);
  CATCH_CHECK(t->name() == "local");
  CATCH_CHECK(t->address().empty());
  t->connect({t->address()});  // one process: nothing to reach
  std::vector<tensor_meta> got;
  std::vector<float> values;
  t->set_handlers(
      [&](const tensor_meta& m, tensor_box b) {
        got.push_back(m);
        values = std::vector<float>(static_cast<const float*>(b.data()), static_cast<const float*>(b.data()) + 3);
      },
      [](int, const std::string& reason) { CATCH_FAIL("unexpected failure: " + reason); });
  tensor_meta m;
  m.kind = tensor_kind::gradient;
  m.microbatch = 2;
  m.virtual_stage = 1;
  t->send(0, m, box(torch::tensor({1.0f, 2.0f, 3.0f})));
  CATCH_REQUIRE(got.size() == 1);
  CATCH_CHECK(got[0].kind == tensor_kind::gradient);
  CATCH_CHECK(got[0].microbatch == 2);
  CATCH_CHECK(got[0].shape == std::vector<std::int64_t>{3});
  CATCH_CHECK(values == std::vector<float>{1.0f, 2.0f, 3.0f});
  CATCH_CHECK_THROWS_AS(t->send(1, m, box(torch::ones({1}))), std::invalid_argument);
}
