from fraglib_study.bench import main

main()
