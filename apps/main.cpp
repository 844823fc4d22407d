// actorpipe executable.
#include <iostream>

#include "apps/cli.hpp"

int main(int argc, char** argv) { return actorpipe::cli_main(argc, argv, std::cout, std::cerr); }
