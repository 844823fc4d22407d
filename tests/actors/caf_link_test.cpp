// The CAF found by cmake/FindCAF.cmake is 0.17 and works: headers, libcaf_core and libcaf_io
// link, an actor answers a request, and the io module loads (the control plane's middleman).
#include <catch2/catch.hpp>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

namespace {
caf::behavior doubler(caf::event_based_actor*) {
  return {[](int x) { return 2 * x; }};
}
}  // namespace

CATCH_TEST_CASE("CAF 0.17 from FindCAF: an actor answers a request", "[actors][caf]") {
  CATCH_REQUIRE(CAF_MAJOR_VERSION == 0);
  CATCH_REQUIRE(CAF_MINOR_VERSION == 17);
  caf::actor_system_config cfg;
  cfg.load<caf::io::middleman>();
  caf::actor_system sys{cfg};
  auto worker = sys.spawn(doubler);
  caf::scoped_actor self{sys};
  int answer = 0;
  std::string failure;
  self->request(worker, std::chrono::seconds(10), 21)
      .receive([&](int y) { answer = y; }, [&](caf::error& e) { failure = sys.render(e); });
  CATCH_CHECK(failure.empty());
  CATCH_CHECK(answer == 42);
  CATCH_CHECK(sys.has_middleman());
  self->send_exit(worker, caf::exit_reason::user_shutdown);
}
