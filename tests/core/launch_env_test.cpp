// Launch environment: each launcher's variables, their precedence, and every bad value.
#include <catch2/catch.hpp>

#include <map>

#include "core/launch_env.hpp"

using namespace actorpipe;
using Catch::Contains;

namespace {
launch_env read(const std::map<std::string, std::string>& vars) {
  return read_launch_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}
}  // namespace

CATCH_TEST_CASE("no launcher: one process on loopback", "[launch]") {
  auto e = read({});
  CATCH_CHECK(e.launcher == "none");
  CATCH_CHECK(e.process == 0);
  CATCH_CHECK(e.processes == 1);
  CATCH_CHECK(e.master_addr == "127.0.0.1");
  CATCH_CHECK(e.master_port == 29500);
}

CATCH_TEST_CASE("torchrun, srun and mpirun variables", "[launch]") {
  auto t = read({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "6000"}});
  CATCH_CHECK(t.launcher == "torchrun");
  CATCH_CHECK(t.process == 3);
  CATCH_CHECK(t.processes == 8);
  CATCH_CHECK(t.local_rank == 1);
  CATCH_CHECK(t.master_addr == "10.1.2.3");
  CATCH_CHECK(t.master_port == 6000);
  auto s = read({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "2"}});
  CATCH_CHECK(s.launcher == "slurm");
  CATCH_CHECK(s.size_variable == "SLURM_NTASKS");  // messages name it (they said WORLD_SIZE)
  CATCH_CHECK(s.process == 5);
  CATCH_CHECK(s.local_rank == 2);
  auto o = read({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  CATCH_CHECK(o.launcher == "openmpi");
  CATCH_CHECK(o.size_variable == "OMPI_COMM_WORLD_SIZE");
  CATCH_CHECK(o.local_rank == 0);  // defaults to the rank
  // srun starting torchrun: torchrun's variables describe this process.
  auto both = read({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  CATCH_CHECK(both.launcher == "torchrun");
  CATCH_CHECK(both.process == 1);
}

CATCH_TEST_CASE("bad launcher variables name the variable and the value", "[launch]") {
  CATCH_CHECK_THROWS_WITH(read({{"RANK", "1"}}), "RANK is set but WORLD_SIZE is not");
  CATCH_CHECK_THROWS_WITH(read({{"SLURM_NTASKS", "4"}}), "SLURM_NTASKS is set but SLURM_PROCID is not");
  CATCH_CHECK_THROWS_WITH(read({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), "RANK='x' is not a non-negative integer");
  CATCH_CHECK_THROWS_WITH(read({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}), "RANK='-1' is not a non-negative integer");
  CATCH_CHECK_THROWS_WITH(read({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), "RANK=2 is not below WORLD_SIZE=2");
  CATCH_CHECK_THROWS_WITH(read({{"RANK", "0"}, {"WORLD_SIZE", "0"}}), "WORLD_SIZE=0 must be >= 1");
  // Ten digits are a world size (launch --nnodes 600000000 --nproc-per-node 2); past INT_MAX, said so.
  CATCH_CHECK(read({{"RANK", "0"}, {"WORLD_SIZE", "1200000000"}}).processes == 1200000000);
  CATCH_CHECK(read({{"RANK", "0"}, {"WORLD_SIZE", "0002"}}).processes == 2);
  CATCH_CHECK_THROWS_WITH(read({{"RANK", "0"}, {"WORLD_SIZE", "2147483648"}}), "WORLD_SIZE=2147483648 is more than 2147483647");
  CATCH_CHECK_THROWS_WITH(read({{"RANK", "0"}, {"WORLD_SIZE", "99999999999999999999"}}),
                          "WORLD_SIZE=99999999999999999999 is more than 2147483647");
  CATCH_CHECK_THROWS_WITH(read({{"MASTER_PORT", "70000"}}), "MASTER_PORT=70000 is not a port (1..65535)");
  CATCH_CHECK(read({{"MASTER_PORT", "+31201"}}).master_port == 31201);  // a sign is no error (it said "not a non-negative integer")
  CATCH_CHECK_THROWS_WITH(read({{"MASTER_PORT", "+"}}), "MASTER_PORT='+' is not a non-negative integer");
  CATCH_CHECK_THROWS_WITH(read({{"MASTER_PORT", "++1"}}), "MASTER_PORT='++1' is not a non-negative integer");
  CATCH_CHECK_THROWS_WITH(read({{"MASTER_PORT", "0"}}), Contains("is not a port"));
  CATCH_CHECK_THROWS_WITH(read({{"MASTER_ADDR", ""}}), "MASTER_ADDR is set but empty");
  // train reads them only for a job of several processes: a one-process run has no use for them.
  const auto for_jobs = [](std::map<std::string, std::string> vars) {
    return read_launch_env([&vars](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    }, true);
  };
  CATCH_CHECK(for_jobs({{"MASTER_PORT", ""}, {"MASTER_ADDR", ""}}).processes == 1);
  CATCH_CHECK_THROWS_WITH(for_jobs({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", ""}}),
                          "MASTER_PORT='' is not a non-negative integer");
  CATCH_CHECK_THROWS_WITH(read({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "a"}}),
                          "OMPI_COMM_WORLD_LOCAL_RANK='a' is not a non-negative integer");
}

CATCH_TEST_CASE("the restart count actorpipe launch sets: 0 without it, a bad value named", "[launch]") {
  CATCH_CHECK(read({}).restart_count == 0);
  CATCH_CHECK(read({{"ACTORPIPE_RESTART_COUNT", "2"}}).restart_count == 2);
  CATCH_CHECK_THROWS_WITH(read({{"ACTORPIPE_RESTART_COUNT", "-1"}}),
                          "ACTORPIPE_RESTART_COUNT='-1' is not a non-negative integer");
}

CATCH_TEST_CASE("an endpoint in messages: an IPv6 address in brackets", "[launch]") {
  CATCH_CHECK(actorpipe::endpoint_text("127.0.0.1", 29500) == "127.0.0.1:29500");
  CATCH_CHECK(actorpipe::endpoint_text("node-7", 1) == "node-7:1");
  CATCH_CHECK(actorpipe::endpoint_text("::1", 29500) == "[::1]:29500");
  CATCH_CHECK(actorpipe::endpoint_text("fe80::1%eth0", 80) == "[fe80::1%eth0]:80");
}
