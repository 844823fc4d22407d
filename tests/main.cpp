// Catch2 main for actorpipe_tests (CATCH_CONFIG_PREFIX_ALL comes from tests/CMakeLists.txt).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
