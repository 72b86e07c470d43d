// Catch2's main for the unit-test executables (accord_unit_tests, accord_ops_unit_tests),
// in its own file so that editing a test does not recompile Catch's runner.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
