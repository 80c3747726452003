// src/harness/inputs.cpp — placeholder
