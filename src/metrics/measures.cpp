// src/metrics/measures.cpp — placeholder
