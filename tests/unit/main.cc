// Catch2's main for accord_unit_tests, in its own file so that editing a test does not
// recompile Catch's runner.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
