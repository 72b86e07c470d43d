// The trainer tests' main(), from Catch2.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
