#!/usr/bin/env bash
# placeholder: replaced by the real venv script
echo "setup_venv.sh not written yet"; exit 1
