// tests/metrics/measures_test.cpp — placeholder
