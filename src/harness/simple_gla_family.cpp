// src/harness/simple_gla_family.cpp — placeholder
