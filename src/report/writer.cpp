// src/report/writer.cpp — placeholder
